"""Calibration of class probabilities, in NumPy: does a probability of 0.9 come true nine times in ten?

- Expected calibration error (ECE) over equal-count bins (15 by default): the images are
  sorted by score and cut into bins of (nearly) equal size, images with the same score
  always in the same bin (so fewer bins can be used than asked for); ECE is the
  image-weighted mean over the bins of |observed rate - mean score|. Top-label ECE scores
  each image by its highest probability and observes whether that class is the label;
  one class against the rest scores each image by that class's probability and observes
  whether the image is of the class.
- Negative log-likelihood (NLL): the mean over images of -ln p(label), in nats, a
  probability below EPSILON counted as EPSILON.
- Brier score, multi-class (Brier 1950): the mean over images of the sum over classes of
  (p_k - [label = k])^2, from 0 (perfect) to 2. One class against the rest it is the mean
  of (p_k - [label = k])^2; those per-class scores sum to the multi-class one.
- Temperature scaling (Guo et al. 2017): softmax(ln p / T), one T > 0 fitted by minimising
  the NLL; it changes no image's most probable class.

Bootstrap intervals take rows of resample weights (see bootstrap.py): a resample's ECE
is the ECE of the resampled images, binned afresh. ECE leans high (chance in a bin's
accuracy adds to its gap), the more so the fewer the images, and a resample's ECE higher
still: its percentile interval can lie above the value. So ECE comes with a bias-corrected
value and the basic bootstrap interval around it (bootstrap.bias_corrected_figure).
"""
import numpy as np

from reporting import bootstrap

DEFAULT_BINS = 15
# A float32 softmax can give 0: a probability below the smallest normal float32 counts as it in logarithms.
EPSILON = float(np.finfo(np.float32).tiny)
TEMPERATURE_BOUNDS = (0.05, 20.0)
BRIER_DEFINITION = ("mean over images of the sum over classes of (probability - one-hot label)^2 "
                    "(Brier 1950; 0 is perfect, 2 the worst)")


def top_label(probabilities, labels):
    """Returns (each image's highest probability [n], 1.0 where that class is its label else 0.0 [n])."""
    probabilities = np.asarray(probabilities, np.float64)
    return probabilities.max(axis=1), (probabilities.argmax(axis=1) == np.asarray(labels)).astype(np.float64)


def one_against_rest(probabilities, labels, index):
    """Returns (each image's probability of class `index` [n], 1.0 where the image is of it else 0.0 [n])."""
    return (np.asarray(probabilities, np.float64)[:, index],
            (np.asarray(labels) == index).astype(np.float64))


def equal_count_bins(scores, num_bins=DEFAULT_BINS):
    """Returns each score's bin (0..num_bins-1): bin k starts at the score in sorted position
    floor(k n / num_bins), so bins hold n / num_bins scores each, give or take one, except that
    equal scores share the bin where the first of them falls (bins left empty are unused)."""
    scores = np.asarray(scores, np.float64)
    edges = np.sort(scores)[(np.arange(1, num_bins) * len(scores)) // num_bins]
    return np.searchsorted(edges, scores, side="right")


def ece(scores, outcomes, num_bins=DEFAULT_BINS):
    """Returns the expected calibration error of `scores` (probabilities) against `outcomes` (1.0
    where it came true, else 0.0) over equal_count_bins: sum over bins of
    (images in bin / n) * |mean outcome - mean score|."""
    scores, outcomes = np.asarray(scores, np.float64), np.asarray(outcomes, np.float64)
    bins = equal_count_bins(scores, num_bins)
    gaps = np.bincount(bins, weights=outcomes - scores, minlength=num_bins)
    return float(np.abs(gaps).sum() / len(scores))


def bins_used(scores, num_bins=DEFAULT_BINS):
    """Returns how many of the equal_count_bins hold images (fewer than `num_bins` when scores tie)."""
    return int(len(np.unique(equal_count_bins(scores, num_bins))))


def weighted_ece(weights, scores, outcomes, num_bins=DEFAULT_BINS):
    """Returns [rows] the ECE of each row of `weights` [rows, n] (how often each image is in a
    resample: whole numbers), each resample cut into equal-count bins of its own; a row of ones
    gives ece(scores, outcomes)."""
    weights = np.rint(np.atleast_2d(weights)).astype(np.int64)
    scores, outcomes = np.asarray(scores, np.float64), np.asarray(outcomes, np.float64)
    order = np.argsort(scores, kind="stable")
    sorted_scores = scores[order]
    starts = np.flatnonzero(np.r_[True, sorted_scores[1:] != sorted_scores[:-1]])  # each distinct score
    w = weights[:, order]
    counts = np.add.reduceat(w, starts, axis=1)  # [rows, distinct scores]
    gaps = np.add.reduceat(w * (outcomes - scores)[order], starts, axis=1)
    total = counts.sum(axis=1, keepdims=True)
    ends = np.cumsum(counts, axis=1)  # where each distinct score's images end in the sorted resample
    # The distinct score ending at sorted position e is in the bin of the number of edge positions
    # floor(k N / B) (k = 1..B-1) before e: those with k < e B / N.
    bins = np.clip((ends * num_bins + total - 1) // total - 1, 0, num_bins - 1)
    rows = len(w)
    flat = (bins + num_bins * np.arange(rows)[:, None]).ravel()
    per_bin = np.bincount(flat, weights=gaps.ravel(), minlength=rows * num_bins).reshape(rows, num_bins)
    return np.abs(per_bin).sum(axis=1) / total[:, 0]


def reliability(scores, outcomes, num_bins=DEFAULT_BINS):
    """Returns the reliability diagram's points: [{'images', 'score', 'observed'}], per used bin
    of equal_count_bins in order, its image count, mean score and mean outcome."""
    scores, outcomes = np.asarray(scores, np.float64), np.asarray(outcomes, np.float64)
    bins = equal_count_bins(scores, num_bins)
    return [{"images": int((bins == b).sum()), "score": float(scores[bins == b].mean()),
             "observed": float(outcomes[bins == b].mean())} for b in np.unique(bins)]


def nll_terms(probabilities, labels):
    """Returns [n] each image's -ln p(its label), in nats (p below EPSILON taken as EPSILON)."""
    probabilities = np.asarray(probabilities, np.float64)
    labels = np.asarray(labels, np.int64)
    return -np.log(np.maximum(probabilities[np.arange(len(labels)), labels], EPSILON))


def nll(probabilities, labels):
    """Returns the negative log-likelihood: the mean over images of -ln p(label), in nats."""
    return float(nll_terms(probabilities, labels).mean())


def brier_terms(probabilities, labels):
    """Returns [n, classes] each image's (p_k - [label = k])^2."""
    probabilities = np.asarray(probabilities, np.float64)
    onehot = np.asarray(labels)[:, None] == np.arange(probabilities.shape[1])
    return (probabilities - onehot) ** 2


def brier(probabilities, labels):
    """Returns the multi-class Brier score: the mean over images of sum_k (p_k - [label = k])^2, from 0 to 2."""
    return float(brier_terms(probabilities, labels).sum(axis=1).mean())


def apply_temperature(probabilities, temperature):
    """Returns softmax(ln p / temperature) of each row of `probabilities` [n, classes] (p below
    EPSILON taken as EPSILON): the same most probable class, its probability lowered when
    temperature > 1 and raised when < 1."""
    logits = np.log(np.maximum(np.asarray(probabilities, np.float64), EPSILON)) / temperature
    logits -= logits.max(axis=1, keepdims=True)
    exp = np.exp(logits)
    return exp / exp.sum(axis=1, keepdims=True)


def fit_temperature(probabilities, labels, bounds=TEMPERATURE_BOUNDS, tolerance=1e-7):
    """Returns the temperature T in `bounds` minimising nll(apply_temperature(probabilities, T), labels),
    found by golden-section search over ln T (the NLL is convex in 1/T, hence unimodal in ln T)."""
    def loss(log_t):
        return nll(apply_temperature(probabilities, np.exp(log_t)), labels)

    low, high = np.log(bounds[0]), np.log(bounds[1])
    ratio = (np.sqrt(5) - 1) / 2
    a, b = high - ratio * (high - low), low + ratio * (high - low)
    loss_a, loss_b = loss(a), loss(b)
    while high - low > tolerance:
        if loss_a <= loss_b:  # the minimum is left of b
            high, b, loss_b = b, a, loss_a
            a = high - ratio * (high - low)
            loss_a = loss(a)
        else:
            low, a, loss_a = a, b, loss_b
            b = low + ratio * (high - low)
            loss_b = loss(b)
    return float(np.exp((low + high) / 2))


def _weighted_mean(terms):
    """Returns a statistic of resample weights [rows, n]: each row's weighted mean of `terms` [n]."""
    return lambda w: (w @ terms) / w.sum(axis=1)


def _per_class(probabilities, labels, index, resamples, num_bins):
    scores, outcomes = one_against_rest(probabilities, labels, index)
    images = int(outcomes.sum())
    return {"images": images,
            "ece": bootstrap.bias_corrected_figure(lambda w: weighted_ece(w, scores, outcomes, num_bins), resamples),
            "bins_used": bins_used(scores, num_bins),
            "nll": nll(probabilities[labels == index], labels[labels == index]) if images else None,
            "brier": float(((scores - outcomes) ** 2).mean())}


def calibration_report(probabilities, labels, class_names, resamples, num_bins=DEFAULT_BINS):
    """Returns the JSON-ready calibration figures of `probabilities` [n, classes] against `labels` [n]:
    top-label ECE (with its bias-corrected value and interval), NLL and Brier score with bootstrap intervals
    over `resamples` (a bootstrap.Resamples of the n images), the reliability diagram's points, and per
    class (one against the rest) ECE likewise, the NLL of the class's images and the Brier score."""
    probabilities, labels = np.asarray(probabilities, np.float64), np.asarray(labels, np.int64)
    confidence, correct = top_label(probabilities, labels)
    return {
        "bins": {"scheme": "equal-count", "requested": int(num_bins), "used": bins_used(confidence, num_bins)},
        "ece": bootstrap.bias_corrected_figure(lambda w: weighted_ece(w, confidence, correct, num_bins),
                                               resamples),
        "nll": bootstrap.figure(_weighted_mean(nll_terms(probabilities, labels)), resamples),
        "brier": bootstrap.figure(_weighted_mean(brier_terms(probabilities, labels).sum(axis=1)), resamples),
        "brier_definition": BRIER_DEFINITION,
        "reliability": reliability(confidence, correct, num_bins),
        "per_class": {name: _per_class(probabilities, labels, i, resamples, num_bins)
                      for i, name in enumerate(class_names)},
    }


def temperature_report(temperature, validation, test, num_bins=DEFAULT_BINS):
    """Returns the JSON-ready account of temperature scaling by `temperature`, fitted on `validation`
    ((probabilities, labels) before scaling): the validation NLL, and the test split's (`test`, the
    same) top-label ECE and NLL, before and after, and the test split's reliability points before."""
    (validation_p, validation_labels), (test_p, test_labels) = validation, test
    scaled_validation = apply_temperature(validation_p, temperature)
    scaled_test = apply_temperature(test_p, temperature)
    return {"method": "temperature", "temperature": temperature, "fitted_on": "validation",
            "validation_images": int(len(validation_labels)),
            "at_bound": bool(min(abs(np.log(temperature / b)) for b in TEMPERATURE_BOUNDS) < 1e-3),
            "validation_nll": {"before": nll(validation_p, validation_labels),
                               "after": nll(scaled_validation, validation_labels)},
            "test_ece": {"before": ece(*top_label(test_p, test_labels), num_bins),
                         "after": ece(*top_label(scaled_test, test_labels), num_bins)},
            "test_nll": {"before": nll(test_p, test_labels), "after": nll(scaled_test, test_labels)},
            "test_reliability_before": reliability(*top_label(test_p, test_labels), num_bins)}
