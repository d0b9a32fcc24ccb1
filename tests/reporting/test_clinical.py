"""The clinical figures against independent plain computations, the null form, the operating
point, and the bootstrap's coverage and grouped resampling."""
import json

import numpy as np
import pytest

from reporting import bootstrap
from reporting.clinical import NO_POSITIVES, at_specificity, clinical_report, group_ids
from reporting.files import markdown

CLASSES = ["CNV", "DME", "DRUSEN", "NORMAL"]


def rank_sum_auc(scores, positive):
    """The Mann-Whitney U of the positives over n_pos * n_neg, with average ranks for ties."""
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores))
    sorted_scores = scores[order]
    start = 0
    while start < len(scores):
        end = start
        while end + 1 < len(scores) and sorted_scores[end + 1] == sorted_scores[start]:
            end += 1
        ranks[order[start:end + 1]] = (start + end) / 2 + 1
        start = end + 1
    n_pos, n_neg = positive.sum(), (~positive).sum()
    return (ranks[positive].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def tied_scores(rng, n, classes):
    """Probabilities rounded to tenths, so that many scores tie (their sums need not be 1 for ranks)."""
    return np.round(rng.dirichlet(np.ones(classes), size=n), 1)


def test_figures_match_plain_counts_and_a_rank_sum_auc_on_tied_scores():
    rng = np.random.default_rng(3)
    probabilities = tied_scores(rng, 400, 4)
    labels = rng.integers(0, 4, 400)
    assert len(np.unique(probabilities[:, 0])) <= 11  # ties there are
    report = clinical_report(probabilities, labels, CLASSES, positive_classes=["CNV", "DME"], resamples=50)
    predicted = probabilities.argmax(1)
    for i, name in enumerate(CLASSES):
        figures = report["per_class"][name]
        tp = sum(1 for y, p in zip(labels, predicted) if y == i and p == i)
        fn = sum(1 for y, p in zip(labels, predicted) if y == i and p != i)
        tn = sum(1 for y, p in zip(labels, predicted) if y != i and p != i)
        fp = sum(1 for y, p in zip(labels, predicted) if y != i and p == i)
        assert figures["sensitivity"]["value"] == pytest.approx(tp / (tp + fn), abs=1e-12)
        assert figures["specificity"]["value"] == pytest.approx(tn / (tn + fp), abs=1e-12)
        assert figures["precision"] == pytest.approx(tp / (tp + fp), abs=1e-12)
        assert figures["auc"]["value"] == pytest.approx(rank_sum_auc(probabilities[:, i], labels == i), abs=1e-12)
        low, high = figures["auc"]["ci"]
        assert low <= figures["auc"]["value"] <= high
    referral = report["referral"]
    positive = labels <= 1
    assert referral["sensitivity"]["value"] == pytest.approx(np.mean(predicted[positive] <= 1))
    assert referral["specificity"]["value"] == pytest.approx(np.mean(predicted[~positive] > 1))
    assert referral["auc"]["value"] == pytest.approx(rank_sum_auc(probabilities[:, :2].sum(1), positive), abs=1e-12)
    assert report["accuracy"]["value"] == pytest.approx(np.mean(predicted == labels))
    assert report["micro"]["sensitivity"]["value"] == pytest.approx(np.mean(predicted == labels))
    assert report["micro"]["auc"]["value"] == pytest.approx(
        rank_sum_auc(probabilities.ravel(), (labels[:, None] == np.arange(4)).ravel()), abs=1e-12)
    assert report["macro"]["auc"] == pytest.approx(np.mean([report["per_class"][n]["auc"]["value"] for n in CLASSES]))


def test_a_class_without_positive_images_is_null_and_says_why():
    rng = np.random.default_rng(0)
    probabilities, labels = rng.dirichlet(np.ones(4), size=60), rng.integers(0, 3, 60)  # no NORMAL
    report = clinical_report(probabilities, labels, CLASSES, positive_classes=["NORMAL"], resamples=20)
    normal = report["per_class"]["NORMAL"]
    assert normal["undefined"] == NO_POSITIVES
    assert normal["sensitivity"] is None and normal["auc"] is None and normal["f1"] is None
    assert normal["specificity"]["value"] is not None  # every image is a negative: still defined
    assert report["referral"]["sensitivity"] is None and report["referral"]["undefined"] == NO_POSITIVES
    assert report["macro"]["classes_averaged"] == {"sensitivity": 3, "auc": 3}
    text = json.dumps(report, allow_nan=False)  # never NaN
    assert "null" in text
    assert "NORMAL (no positive images)" in markdown(report)
    every = clinical_report(probabilities, np.zeros(60, int), CLASSES, resamples=20)["per_class"]["CNV"]
    assert every["specificity"] is None and every["auc"] is None and every["undefined"] == "no negative images"


def test_the_operating_point_is_the_best_sensitivity_at_the_target_specificity():
    rng = np.random.default_rng(5)
    scores, truth = np.round(rng.random(300), 2), rng.random(300) < 0.4
    point = at_specificity(scores, truth, 0.9)
    best = max((np.mean(scores[truth] >= t), t) for t in np.unique(scores)
               if np.mean(scores[~truth] < t) >= 0.9)
    assert point["specificity"] >= 0.9
    assert (point["sensitivity"], point["threshold"]) == pytest.approx(best)


def test_patients_are_read_from_oct2017_file_names():
    from pipeline.tasks.oct import TASK
    ids, groups, unmatched = group_ids(
        ["test/CNV/CNV-1016042-1.jpeg", "test/DME/DME-1016042-3.jpeg", "x/00007-NORMAL-22-1.jpeg", "odd.png"],
        TASK.group_pattern)
    assert ids[0] == ids[1] != ids[2] != ids[3] and groups == 3 and unmatched == 1


def test_the_accuracy_interval_covers_the_truth_about_95_percent_of_the_time():
    rng = np.random.default_rng(2024)
    truth, simulations, covered = 0.85, 400, 0
    for _ in range(simulations):
        correct = rng.random(500) < truth
        weights = bootstrap.resample_weights(500, 1000, rng)
        low, high = bootstrap.percentile_interval(bootstrap.weighted_rate(weights, correct, np.ones(500)))
        covered += low <= truth <= high
    assert 0.92 <= covered / simulations <= 0.98


def test_grouped_resampling_gives_wider_intervals_when_a_group_s_images_agree():
    rng = np.random.default_rng(7)
    groups = np.repeat(np.arange(100), 5)  # 100 patients, 5 scans each
    correct = np.repeat(rng.random(100) < 0.8, 5) ^ (rng.random(500) < 0.05)  # a patient's scans mostly agree
    widths = {}
    for unit, ids in (("image", None), ("group", groups)):
        weights = bootstrap.resample_weights(500, 1000, np.random.default_rng(0), ids)
        low, high = bootstrap.percentile_interval(bootstrap.weighted_rate(weights, correct, np.ones(500)))
        widths[unit] = high - low
    assert widths["group"] > 1.5 * widths["image"]
    report = clinical_report(np.eye(2)[correct.astype(int)], np.ones(500, int), ["a", "b"],
                             groups=groups, resamples=200)
    assert report["bootstrap"]["unit"] == "group" and report["bootstrap"]["groups"] == 100


def test_resamples_come_in_bounded_chunks_and_are_the_same_for_every_statistic():
    resamples = bootstrap.Resamples(300, 1000, seed=4, chunk_values=300 * 64)  # 64 rows at a time
    sizes = []
    first = resamples.apply(lambda w: sizes.append(w.shape) or w.sum(1))
    assert len(first) == 1000 and set(sizes) == {(64, 300), (1000 % 64, 300)} and (first == 300).all()
    correct = np.random.default_rng(0).random(300) < 0.7
    rates = [resamples.apply(lambda w: bootstrap.weighted_rate(w, correct, np.ones(300))) for _ in range(2)]
    assert (rates[0] == rates[1]).all() and rates[0].std() > 0


def test_the_referral_threshold_is_chosen_on_the_validation_split_and_applied_to_the_test_split():
    rng = np.random.default_rng(8)
    validation = (rng.dirichlet(np.ones(4), size=200), rng.integers(0, 4, 200))
    probabilities, labels = rng.dirichlet(np.ones(4), size=300), rng.integers(0, 4, 300)
    report = clinical_report(probabilities, labels, CLASSES, positive_classes=["CNV", "DME"], resamples=50,
                             at_specificity_target=0.9, validation=validation)
    point = report["referral"]["at_specificity_validation"]
    chosen = at_specificity(validation[0][:, :2].sum(1), validation[1] <= 1, 0.9)
    assert point["threshold"] == chosen["threshold"] is not None
    assert point["validation"] == {"images": 200, "positives": int((validation[1] <= 1).sum()),
                                   "sensitivity": chosen["sensitivity"], "specificity": chosen["specificity"]}
    called, positive = probabilities[:, :2].sum(1) >= chosen["threshold"], labels <= 1
    assert point["test"]["sensitivity"]["value"] == pytest.approx(np.mean(called[positive]))
    assert point["test"]["specificity"]["value"] == pytest.approx(np.mean(~called[~positive]))
    assert report["referral"]["at_specificity"]["chosen_on"] == "test"  # still there, to compare
    text = markdown(report)
    assert f"| Threshold {chosen['threshold']:.4f}, chosen on the validation split for specificity >= 0.9 |" in text
    assert "chosen on the 200 validation images" in text and "(optimistic)" in text
    alone = clinical_report(probabilities, labels, CLASSES, positive_classes=["CNV"], resamples=20)
    assert alone["referral"]["at_specificity_validation"] is None
    assert "There is no validation split: the threshold is chosen on the test split itself" in markdown(alone)
    no_positives = clinical_report(probabilities, labels, CLASSES, positive_classes=["CNV"], resamples=20,
                                   validation=(validation[0], np.full(200, 3)))
    assert no_positives["referral"]["at_specificity_validation"]["undefined"] == \
        "the validation split has no positive images"


def test_the_plots_of_class_names_in_a_script_the_font_lacks_say_nothing_on_stderr(recwarn):
    """Class folders named in Japanese: matplotlib's font has no such glyphs, and each plot put 4 warnings on
    stderr in every run (the names are right in report.json and report.md; the plots show boxes)."""
    from reporting.files import plot_pngs
    rng = np.random.default_rng(0)
    names = ["blue_日本", "赤", "green"]
    labels = np.repeat(np.arange(3), 20)
    probabilities = rng.dirichlet(np.ones(3), size=60)
    pngs = plot_pngs(clinical_report(probabilities, labels, names, resamples=10), probabilities, labels)
    assert pngs and all(png.startswith(b"\x89PNG") for png in pngs.values())
    assert not [w for w in recwarn if "Glyph" in str(w.message)], [str(w.message) for w in recwarn]


def test_a_class_named_with_a_bar_keeps_report_md_s_tables_whole():
    """A class folder named a|b split its row of every table (and the confusion matrix's header) in two."""
    rng = np.random.default_rng(1)
    names = ["a|b", "c", "d"]
    probabilities, labels = rng.dirichlet(np.ones(3), size=60), rng.integers(0, 3, 60)
    text = markdown(clinical_report(probabilities, labels, names, resamples=20))
    rows = [line for line in text.splitlines() if line.startswith("|")]
    tables, columns = [], None
    for line in text.splitlines() + [""]:  # each table's rows have as many cells as its header
        if line.startswith("|"):
            cells = len(line.replace("\\|", "").split("|"))
            columns = columns or cells
            tables.append((cells, columns, line))
        else:
            columns = None
    assert rows and all(cells == header for cells, header, _ in tables), [t for t in tables if t[0] != t[1]]
    assert any(line.startswith("| a\\|b ") for line in rows)
