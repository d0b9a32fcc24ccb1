"""The files a clinical report is written to: report.json (the report itself), report.md (a
table a paper could print), the confusion matrix, ROC curves and reliability diagram as PNGs,
and every test image's scores as test_scores.csv."""
import csv
import io
import json
import warnings

import numpy as np

from acquisition import storage
from reporting import calibration
from reporting.clinical import roc_points
from reporting.fonts import class_labels, named_by_index

REPORT_JSON, REPORT_MD, SCORES_CSV = "report.json", "report.md", "test_scores.csv"
CONFUSION_PNG, ROC_PNG, RELIABILITY_PNG = "confusion_matrix.png", "roc_curves.png", "reliability_diagram.png"


def _atomic_write(path, data):
    return storage.write_atomically(path, data)


def _cell(name):
    """Returns a class name for a Markdown table's cell: its | escaped (a class folder may be named a|b)."""
    return name.replace("|", "\\|")


def _percent(figure):
    """Returns '97.8% (96.9-98.6)' for {'value', 'ci'}, 'n/a' for None."""
    if figure is None or (isinstance(figure, dict) and figure["value"] is None):
        return "n/a"
    if not isinstance(figure, dict):
        return f"{100 * figure:.1f}%"
    ci = figure["ci"]
    return f"{100 * figure['value']:.1f}%" + (f" ({100 * ci[0]:.1f}-{100 * ci[1]:.1f})" if ci else "")


def _decimal(figure):
    if figure is None or figure["value"] is None:
        return "n/a"
    ci = figure["ci"]
    return f"{figure['value']:.3f}" + (f" ({ci[0]:.3f}-{ci[1]:.3f})" if ci else "")


def _ece(figure):
    """Returns ECE as measured, then bias-corrected with its interval (see reporting.bootstrap)."""
    if figure is None or figure["value"] is None or figure.get("bias_corrected") is None:
        return _decimal(figure)
    return f"{figure['value']:.3f}; {_decimal({**figure, 'value': figure['bias_corrected']})}"


def _plain(value):
    return "n/a" if value is None else f"{value:.3f}"


def _threshold(value, defined=True):
    """Returns a threshold in words: None is one above every score (nothing called positive), unless undefined."""
    if not defined:
        return "n/a"
    return "above every score" if value is None else f"{value:.4f}"


def _chosen_on_validation(point):
    """Returns the sentence on the threshold chosen on the validation split (`point`, or None: no split)."""
    if point is None:
        return "There is no validation split: the threshold is chosen on the test split itself, which flatters it."
    if point.get("undefined"):
        return f"No threshold is chosen on the validation split: {point['undefined']}."
    seen = point["validation"]
    return (f"A clinical study fixes its threshold before it sees the test split: the threshold for specificity "
            f">= {point['target']:g} is chosen on the {seen['images']} validation images (there: sensitivity "
            f"{_percent(seen['sensitivity'])}, specificity {_percent(seen['specificity'])}) and applied to the "
            "test split. The threshold chosen on the test split itself is optimistic, shown only to compare.")


def _threshold_row(point, chosen_on):
    """Returns the table row of the decision `score >= point's threshold` on the test split."""
    if chosen_on == "validation":
        threshold, test = _threshold(point["threshold"]), point["test"]
        how = "chosen on the validation split"
    else:
        threshold, test = _threshold(point["threshold"], point["sensitivity"] is not None), point
        how = "chosen on the test split (optimistic)"
    return (f"| Threshold {threshold}, {how} for specificity >= {point['target']:g} | "
            f"{_percent(test['sensitivity'])} | {_percent(test['specificity'])} | |")


def referral_markdown(referral):
    """Returns report.md's referral section (a list of lines): the decision at the most probable class,
    at the threshold chosen on the validation split and at the one chosen on the test split."""
    validated = referral["at_specificity_validation"]
    lines = ["", f"## Referral: {' or '.join(referral['positive_classes'])} against the rest", "",
             f"{referral['positives']} positive and {referral['negatives']} negative images; the score is the "
             "sum of the positive classes' probabilities. " + _chosen_on_validation(validated), "",
             "| Decision | Sensitivity (95% CI) | Specificity (95% CI) | ROC AUC (95% CI) |",
             "|---|---|---|---|",
             f"| Most probable class | {_percent(referral['sensitivity'])} | "
             f"{_percent(referral['specificity'])} | {_decimal(referral['auc'])} |"]
    if validated and not validated.get("undefined"):
        lines.append(_threshold_row(validated, "validation"))
    return lines + [_threshold_row(referral["at_specificity"], "test")]


def calibration_markdown(figures):
    """Returns report.md's calibration section (a list of lines) for the report's 'calibration' object."""
    bins = figures["bins"]
    lines = ["", "## Calibration", "",
             f"Expected calibration error (ECE) of the most probable class: {_ece(figures['ece'])}, over "
             f"{bins['requested']} equal-count bins of the test images' highest probability ({bins['used']} used: "
             "equal probabilities share a bin); 0 when each bin's accuracy equals its mean probability. ECE leans "
             "high (chance in a bin's accuracy adds to its gap), the more so the fewer the images, and a "
             "resample's ECE higher still. So the measured value comes first, then the value less the "
             "resamples' bias, with the basic bootstrap interval around it.", "",
             f"Negative log-likelihood {_decimal(figures['nll'])} nats per image; Brier score "
             f"{_decimal(figures['brier'])}, the {figures['brier_definition']}.", "",
             "| Class | Images | ECE, one against the rest; bias-corrected (95% CI) | NLL of its images "
             "| Brier, one against the rest |",
             "|---|---:|---|---:|---:|"]
    for name, f in figures["per_class"].items():
        lines.append(f"| {_cell(name)} | {f['images']} | {_ece(f['ece'])} | {_plain(f['nll'])} | "
                     f"{_plain(f['brier'])} |")
    return lines + (temperature_markdown(figures["temperature"]) if figures.get("temperature") else [])


def temperature_markdown(scaling):
    """Returns report.md's lines on temperature scaling (the calibration's 'temperature' object)."""
    nll = scaling["validation_nll"]
    low, high = calibration.TEMPERATURE_BOUNDS
    bound = (f" It lies at a bound of the search ({low:g} to {high:g}): the probabilities are far from calibrated, "
             "or carry next to no information." if scaling["at_bound"] else "")
    return ["", f"Temperature scaling (--calibrate temperature): T = {scaling['temperature']:.4f}, fitted on the "
            f"{scaling['validation_images']} validation images, never the test split, by minimising their NLL "
            f"(from {nll['before']:.3f} to {nll['after']:.3f} nats).{bound} The export serves softmax(ln p / T), "
            "the same most probable class, and the figures of this report are of those probabilities. On the test "
            "split:", "",
            "| Probabilities | ECE | NLL |", "|---|---:|---:|",
            f"| Before scaling | {_plain(scaling['test_ece']['before'])} | {_plain(scaling['test_nll']['before'])} |",
            f"| Scaled (served) | {_plain(scaling['test_ece']['after'])} | {_plain(scaling['test_nll']['after'])} |"]


def markdown(report, title="Test evaluation"):
    """Returns the report as Markdown: accuracy, a row per class and the averages, the referral decision."""
    boot = report["bootstrap"]
    unit = (f"{boot['groups']} groups (`{boot['group_pattern']}` on the file names), every image of a drawn "
            "group with it" if boot["unit"] == "group" else f"{report['test_images']} images")
    lines = [f"# {title}", "",
             f"{report['test_images']} test images. Accuracy {_percent(report['accuracy'])}.", "",
             *([f"Test-time augmentation: each image's probabilities are the mean over {len(report['tta'])} views "
                f"({', '.join(report['tta'])}); every figure here is of those means.", ""] if report.get("tta") else []),
             f"Intervals: {100 * report['confidence_level']:.0f}% percentile bootstrap, {boot['resamples']} "
             f"resamples (seed {boot['seed']}) of {unit}. AUC: exact, one class against the rest, ties as half.", "",
             "| Class | Images | Sensitivity (95% CI) | Specificity (95% CI) | Precision | F1 | ROC AUC (95% CI) |",
             "|---|---:|---|---|---:|---:|---|"]
    for name, f in report["per_class"].items():
        note = f" ({f['undefined']})" if f.get("undefined") else ""
        lines.append(f"| {_cell(name)}{note} | {f['positives']} | {_percent(f['sensitivity'])} | "
                     f"{_percent(f['specificity'])} | {_percent(f['precision'])} | {_percent(f['f1'])} | "
                     f"{_decimal(f['auc'])} |")
    macro, micro = report["macro"], report["micro"]
    lines.append(f"| Macro average | | {_percent(macro['sensitivity'])} | {_percent(macro['specificity'])} | "
                 f"{_percent(macro['precision'])} | {_percent(macro['f1'])} | "
                 f"{_plain(macro['auc'])} |")
    lines.append(f"| Micro average | | {_percent(micro['sensitivity'])} | {_percent(micro['specificity'])} | "
                 f"{_percent(micro['precision'])} | {_percent(micro['f1'])} | {_decimal(micro['auc'])} |")
    if report.get("referral"):
        lines += referral_markdown(report["referral"])
    lines += calibration_markdown(report["calibration"])
    lines += ["", "Confusion matrix (rows: true class, columns: predicted):", "",
              "| | " + " | ".join(map(_cell, report["class_names"])) + " |",
              "|---|" + "---:|" * len(report["class_names"])]
    lines += [f"| {_cell(name)} | " + " | ".join(str(v) for v in row) + " |"
              for name, row in zip(report["class_names"], report["confusion_matrix"])]
    lines += _labels_in_plots(report["class_names"])
    return "\n".join(lines) + "\n"


def _labels_in_plots(names):
    """Returns the report's lines naming the classes the plots label by their index (no installed font draws
    their names: see fonts.class_labels); none when every name is drawn."""
    by_index = named_by_index(names)
    if not by_index:
        return []
    return ["", f"The plots label by index the classes no installed font here can draw: {', '.join(by_index)}."]


def _png(figure):
    buffer = io.BytesIO()
    with warnings.catch_warnings():  # class names in a script the font lacks (CJK): boxes, not 4 lines on stderr
        warnings.filterwarnings("ignore", message=r"Glyph \d+ .*missing from (current )?font", category=UserWarning)
        figure.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    return buffer.getvalue()


def plot_pngs(report, probabilities, labels):
    """Returns {file name: PNG bytes} of the confusion matrix, the ROC curves (one class against the rest for
    each class with positives and negatives, and the referral decision) and the reliability diagrams; a class
    name no installed font can draw is labelled by its index (see fonts.class_labels)."""
    import matplotlib
    matplotlib.use("Agg")
    settings, names = class_labels(report["class_names"])
    with matplotlib.rc_context(settings):
        return _plot_pngs(report, names, probabilities, labels)


def _plot_pngs(report, names, probabilities, labels):
    from matplotlib import pyplot as plt
    matrix = np.asarray(report["confusion_matrix"])
    pngs = {}
    figure, axes = plt.subplots(figsize=(1.2 * len(names) + 2, 1.2 * len(names) + 1.5))
    shares = matrix / np.maximum(matrix.sum(1, keepdims=True), 1)
    axes.imshow(shares, cmap="Blues", vmin=0, vmax=1)
    for (i, j), count in np.ndenumerate(matrix):
        axes.text(j, i, str(count), ha="center", va="center", color="white" if shares[i, j] > 0.5 else "black")
    axes.set_xticks(range(len(names)), names, rotation=45, ha="right")
    axes.set_yticks(range(len(names)), names)
    axes.set_xlabel("predicted class")
    axes.set_ylabel("true class")
    pngs[CONFUSION_PNG] = _png(figure)
    plt.close(figure)

    figure, axes = plt.subplots(figsize=(5.5, 5))
    probabilities, labels = np.asarray(probabilities), np.asarray(labels)
    curves = [(label, probabilities[:, i], labels == i, report["per_class"][name]["auc"])
              for i, (name, label) in enumerate(zip(report["class_names"], names))]
    referral = report.get("referral")
    if referral:
        index = [report["class_names"].index(n) for n in referral["positive_classes"]]
        curves.append(("referral: " + "+".join(names[i] for i in index), probabilities[:, index].sum(1),
                       np.isin(labels, index), referral["auc"]))
    for name, scores, truth, auc in curves:
        if auc is not None and auc["value"] is not None:
            fpr, tpr = roc_points(scores, truth)
            axes.plot(fpr, tpr, label=f"{name} (AUC {auc['value']:.3f})",
                      linestyle="--" if name.startswith("referral") else "-")
    axes.plot([0, 1], [0, 1], color="grey", linewidth=0.5)
    axes.set_xlabel("1 - specificity")
    axes.set_ylabel("sensitivity")
    axes.legend(loc="lower right", fontsize="small")
    pngs[ROC_PNG] = _png(figure)
    plt.close(figure)
    pngs[RELIABILITY_PNG] = _reliability_png(report, names, probabilities, labels)
    return pngs


def _reliability_png(report, names, probabilities, labels):
    """Returns the PNG of the reliability diagrams: the most probable class's accuracy against its
    mean probability per bin (the report's points), and each class's rate against its mean probability,
    one against the rest, labelled `names` (see fonts.class_labels)."""
    from matplotlib import pyplot as plt
    figures = report["calibration"]
    figure, (top, per_class) = plt.subplots(1, 2, figsize=(10, 5))
    points = figures["reliability"]
    scaling = figures.get("temperature")
    top.plot([p["score"] for p in points], [p["observed"] for p in points], marker="o",
             label=f"{'scaled (served)' if scaling else 'test images'}, ECE {figures['ece']['value']:.3f}")
    if scaling:
        before = scaling["test_reliability_before"]
        top.plot([p["score"] for p in before], [p["observed"] for p in before], marker="o", linestyle="--",
                 label=f"before scaling (T = {scaling['temperature']:.3f}), ECE {scaling['test_ece']['before']:.3f}")
    top.set_xlabel("mean highest probability in the bin")
    top.set_ylabel("accuracy in the bin")
    top.set_title(f"Most probable class, {len(points)} equal-count bins", fontsize="medium")
    for i, (name, label) in enumerate(zip(report["class_names"], names)):
        scores, outcomes = calibration.one_against_rest(probabilities, labels, i)
        points = calibration.reliability(scores, outcomes, figures["bins"]["requested"])
        per_class.plot([p["score"] for p in points], [p["observed"] for p in points], marker=".",
                       label=f"{label} (ECE {figures['per_class'][name]['ece']['value']:.3f})")
    per_class.set_xlabel("mean probability of the class in the bin")
    per_class.set_ylabel("share of the bin's images of the class")
    per_class.set_title("Each class against the rest", fontsize="medium")
    for axes in (top, per_class):
        axes.plot([0, 1], [0, 1], color="grey", linewidth=0.5)
        axes.set_xlim(0, 1)
        axes.set_ylim(0, 1)
        axes.legend(loc="upper left", fontsize="small")
    png = _png(figure)
    plt.close(figure)
    return png


def write_report_files(model_dir, report, probabilities, labels, keys):
    """Writes report.json (exactly `report`), report.md, the PNGs of plot_pngs and test_scores.csv
    (a row per test image: its key, label and probabilities) into `model_dir`; returns
    {file name: PNG bytes} for TensorBoard."""
    _atomic_write(storage.join(model_dir, REPORT_JSON), (json.dumps(report, indent=2) + "\n").encode())
    _atomic_write(storage.join(model_dir, REPORT_MD), markdown(report).encode())
    pngs = plot_pngs(report, probabilities, labels)
    for name, data in pngs.items():
        _atomic_write(storage.join(model_dir, name), data)
    rows = io.StringIO()
    writer = csv.writer(rows)
    writer.writerow(["image", "label"] + [f"p_{n}" for n in report["class_names"]])
    for key, label, probs in zip(keys, labels, probabilities):
        writer.writerow([key, report["class_names"][label]] + [repr(float(p)) for p in probs])
    _atomic_write(storage.join(model_dir, SCORES_CSV), rows.getvalue().encode())
    return pngs
