"""The clinical figures of a test evaluation, from each image's class probabilities and label.

Per class (one against the rest): sensitivity (recall), specificity, precision,
F1 and ROC AUC; their macro averages (the mean over classes where defined) and
micro averages (pooled over the one-against-rest problems); a referral decision
(`positive_classes` against the rest, as Kermany et al. 2018 report urgent
referrals); and 95% percentile-bootstrap intervals for accuracy, sensitivity,
specificity and AUC, resampling groups (patients) when the images have them; and the
probabilities' calibration (see calibration.py), with intervals from the same resamples.

The AUC is exact: the Mann-Whitney statistic over all the scores, ties counted
as half. A figure that needs positive images a class does not have is None
(JSON null) beside "undefined": "no positive images" (or negative ones: "no
negative images").
"""
import os
import re

import numpy as np

from reporting import bootstrap, calibration

NO_POSITIVES = "no positive images"
NO_NEGATIVES = "no negative images"


def group_ids(files, pattern):
    """Returns (integer group id per file, number of groups, files whose name `pattern` does not match).

    The group is the first capture group of `pattern` (or its whole match) searched in
    each file's base name; a file it does not match is a group of its own.
    """
    regex, names, ids, unmatched = re.compile(pattern), {}, [], 0
    for i, path in enumerate(files):
        match = regex.search(os.path.basename(path))
        if match is None:
            unmatched += 1
            key = ("file", i)
        else:
            key = ("group", match.group(1) if regex.groups else match.group(0))
        ids.append(names.setdefault(key, len(names)))
    return np.asarray(ids, np.int64), len(names), unmatched


def _ratio(numerator, denominator):
    return float(numerator / denominator) if denominator else None


def _f1(precision, recall):
    if precision is None or recall is None:
        return None
    return 2 * precision * recall / (precision + recall) if precision + recall else 0.0


def _binary_figures(draws, truth, decision, scores):
    """Returns sensitivity, specificity and AUC (each {'value', 'ci'}) and the counts of a binary problem."""
    positives, negatives = int(truth.sum()), int((~truth).sum())
    figures = {"positives": positives, "negatives": negatives,
               "true_positives": int((truth & decision).sum()), "false_positives": int((~truth & decision).sum())}
    if positives == 0:
        figures.update(sensitivity=None, auc=None, undefined=NO_POSITIVES)
    else:
        figures["sensitivity"] = bootstrap.figure(lambda w: bootstrap.weighted_rate(w, decision, truth), draws)
        figures["auc"] = (bootstrap.figure(lambda w: bootstrap.weighted_auc(w, scores, truth), draws)
                          if negatives else None)
    figures["specificity"] = (bootstrap.figure(lambda w: bootstrap.weighted_rate(w, ~decision, ~truth), draws)
                              if negatives else None)
    if not negatives:
        figures.setdefault("undefined", NO_NEGATIVES)
    return figures


def _per_class(draws, probabilities, labels, predicted, name_index):
    truth, decision = labels == name_index, predicted == name_index
    figures = _binary_figures(draws, truth, decision, probabilities[:, name_index])
    recall = figures["sensitivity"]["value"] if figures["sensitivity"] else None
    precision = _ratio(figures["true_positives"], int(decision.sum()))
    figures["precision"], figures["f1"] = precision, _f1(precision, recall)
    return figures


def at_specificity(scores, truth, target):
    """Returns {'target', 'threshold', 'sensitivity', 'specificity'}: the highest sensitivity among the
    thresholds t (calling score >= t positive) whose specificity is at least `target`, and that t
    (None when only calling nothing positive reaches the target; figures None without positives
    or negatives)."""
    scores, truth = np.asarray(scores, np.float64), np.asarray(truth, bool)
    result = {"target": target, "threshold": None, "sensitivity": None, "specificity": None}
    negatives, positives = np.sort(scores[~truth]), scores[truth]
    if not len(negatives) or not len(positives):
        return result
    candidates = np.r_[np.unique(scores), np.inf]
    specificity = np.searchsorted(negatives, candidates, side="left") / len(negatives)
    # Sensitivity falls as the threshold rises: the lowest threshold meeting the target is the best.
    chosen = candidates[np.argmax(specificity >= target - 1e-12)]
    result["threshold"] = None if np.isinf(chosen) else float(chosen)
    result["sensitivity"] = float(np.mean(positives >= chosen))
    result["specificity"] = float(np.mean(negatives < chosen))
    return result


def _averages(per_class, draws, probabilities, labels, predicted, num_classes):
    def mean(key):
        values = [f[key]["value"] if isinstance(f[key], dict) else f[key]
                  for f in per_class.values() if f.get(key) is not None]
        values = [v for v in values if v is not None]
        return float(np.mean(values)) if values else None

    macro = {key: mean(key) for key in ("sensitivity", "specificity", "precision", "f1", "auc")}
    macro["classes_averaged"] = {key: sum(1 for f in per_class.values() if f.get(key) is not None)
                                 for key in ("sensitivity", "auc")}
    # Micro: the one-against-rest problems pooled. In single-label classification pooled
    # sensitivity, precision and F1 all equal the accuracy.
    onehot = (labels[:, None] == np.arange(num_classes)).ravel()
    chosen = (predicted[:, None] == np.arange(num_classes)).ravel()
    k = num_classes  # an image weighs on each of its k problems
    figure = bootstrap.figure
    micro = {"sensitivity": figure(lambda w: bootstrap.weighted_rate(w, chosen, onehot), draws, k),
             "specificity": figure(lambda w: bootstrap.weighted_rate(w, ~chosen, ~onehot), draws, k),
             "auc": figure(lambda w: bootstrap.weighted_auc(w, probabilities.ravel(), onehot), draws, k)}
    micro["precision"] = micro["f1"] = micro["sensitivity"]["value"]
    return macro, micro


def clinical_report(probabilities, labels, class_names, groups=None, positive_classes=None,
                    at_specificity_target=0.95, resamples=bootstrap.DEFAULT_RESAMPLES, seed=bootstrap.DEFAULT_SEED,
                    group_pattern=None, validation=None):
    """Returns the clinical report of a test evaluation (a JSON-ready dict; see the module docstring).

    `probabilities` [n, classes] and `labels` [n] (class indices) come from the evaluation;
    `groups` (an integer id per image, see group_ids) makes the bootstrap resample groups;
    `positive_classes` (names) adds the 'referral' decision, scored by their summed probability,
    its threshold for `at_specificity_target` chosen on `validation` ((probabilities, labels) of
    the validation split) when given, and on the test split too (see referral_report).
    """
    probabilities = np.asarray(probabilities, np.float64)
    labels = np.asarray(labels, np.int64)
    predicted = probabilities.argmax(axis=1)
    n, num_classes = probabilities.shape
    draws = bootstrap.Resamples(n, resamples, seed, groups)
    matrix = np.zeros((num_classes, num_classes), np.int64)
    np.add.at(matrix, (labels, predicted), 1)
    per_class = {name: _per_class(draws, probabilities, labels, predicted, i) for i, name in enumerate(class_names)}
    macro, micro = _averages(per_class, draws, probabilities, labels, predicted, num_classes)
    report = {
        "class_names": list(class_names),
        "test_images": int(n),
        "confidence_level": bootstrap.CONFIDENCE,
        "bootstrap": {"method": "percentile", "resamples": int(resamples), "seed": int(seed),
                      "unit": "image" if groups is None else "group",
                      "groups": int(n if groups is None else np.max(groups) + 1),
                      "group_pattern": group_pattern},
        "accuracy": bootstrap.figure(lambda w: bootstrap.weighted_rate(w, predicted == labels, np.ones(n)), draws),
        "confusion_matrix": matrix.tolist(),
        "per_class": per_class,
        "macro": macro,
        "micro": micro,
        "calibration": calibration.calibration_report(probabilities, labels, class_names, draws),
    }
    if positive_classes:
        report["referral"] = referral_report(probabilities, labels, predicted, class_names, positive_classes,
                                             draws, at_specificity_target, validation)
    return report


def referral_report(probabilities, labels, predicted, class_names, positive_classes, draws, target,
                    validation=None):
    """Returns the binary decision `positive_classes` against the rest: sensitivity and specificity
    at the argmax decision, AUC of the summed positive probabilities, and the operating points at
    specificity `target` (see at_specificity): 'at_specificity_validation', the threshold chosen on
    `validation` ((probabilities, labels), or None: then it is None) applied to the test split, as a
    clinical study must; and 'at_specificity', chosen on the test split itself (optimistic)."""
    index = [list(class_names).index(name) for name in positive_classes]
    truth, decision = np.isin(labels, index), np.isin(predicted, index)
    scores = probabilities[:, index].sum(axis=1)
    figures = {"positive_classes": list(positive_classes), "decision": "argmax",
               "score": "sum of the positive classes' probabilities"}
    figures.update(_binary_figures(draws, truth, decision, scores))
    figures["at_specificity"] = {**at_specificity(scores, truth, target), "chosen_on": "test"}
    figures["at_specificity_validation"] = None
    if validation is not None:
        validation_truth = np.isin(validation[1], index)
        validation_scores = np.asarray(validation[0], np.float64)[:, index].sum(axis=1)
        figures["at_specificity_validation"] = validation_operating_point(
            validation_scores, validation_truth, scores, truth, target, draws)
    return figures


def _rate(draws, hits, among):
    """Returns {'value', 'ci'} of the share of `among` that `hits`, or None when nothing is `among`."""
    return bootstrap.figure(lambda w: bootstrap.weighted_rate(w, hits, among), draws) if among.any() else None


def validation_operating_point(validation_scores, validation_truth, scores, truth, target, draws):
    """Returns the threshold chosen on the validation split for specificity `target` (at_specificity
    of `validation_scores`, `validation_truth`) and the test split's sensitivity and specificity
    ({'value', 'ci'}) when `scores` >= it are called positive; those are None ('undefined' says why)
    when the validation split has no positive or no negative images."""
    chosen = at_specificity(validation_scores, validation_truth, target)
    point = {"target": target, "chosen_on": "validation", "threshold": chosen["threshold"],
             "validation": {"images": int(len(validation_truth)), "positives": int(validation_truth.sum()),
                            "sensitivity": chosen["sensitivity"], "specificity": chosen["specificity"]},
             "test": {"sensitivity": None, "specificity": None}}
    if chosen["sensitivity"] is None:
        point["undefined"] = "the validation split has " + (NO_POSITIVES if not validation_truth.any() else
                                                            NO_NEGATIVES)
        return point
    decision = scores >= (np.inf if chosen["threshold"] is None else chosen["threshold"])
    point["test"] = {"sensitivity": _rate(draws, decision, truth), "specificity": _rate(draws, ~decision, ~truth)}
    return point


def roc_points(scores, truth):
    """Returns (false-positive rates, true-positive rates) of the ROC curve of `scores` for the
    `truth` mask, one point per distinct threshold, from (0, 0) to (1, 1)."""
    scores, truth = np.asarray(scores, np.float64), np.asarray(truth, bool)
    order = np.argsort(-scores, kind="stable")
    scores, truth = scores[order], truth[order]
    last_of_tie = np.r_[scores[1:] != scores[:-1], True]
    tp, fp = np.cumsum(truth)[last_of_tie], np.cumsum(~truth)[last_of_tie]
    return np.r_[0.0, fp / max(fp[-1], 1)], np.r_[0.0, tp / max(tp[-1], 1)]
