"""Bootstrap intervals, vectorised: every resample is a row of weights.

A resample of n images drawn with replacement is the count of times each image
was drawn; statistics are then weighted sums (a matrix product for all
resamples at once). Grouped resampling draws whole groups (patients) with
replacement, and every image of a drawn group comes with it: images of one
patient are not independent, and resampling them one by one understates the
spread.

Intervals are percentile intervals, except for a statistic that leans high in
resamples (ECE, see bias_corrected_figure), whose percentile interval can lie
wholly above its value.
"""
import numpy as np

DEFAULT_RESAMPLES = 1000
DEFAULT_SEED = 0
CONFIDENCE = 0.95


def _counts(draws, size):
    """Returns [rows, size] counts of each index in each row of `draws` [rows, k]."""
    rows = draws.shape[0]
    flat = (draws + size * np.arange(rows)[:, None]).ravel()
    return np.bincount(flat, minlength=rows * size).reshape(rows, size).astype(np.float64)


def resample_weights(num_images, resamples=DEFAULT_RESAMPLES, rng=None, groups=None):
    """Returns [resamples, num_images] weights: how often each image is in each resample.

    `groups` (one integer id per image, 0..G-1) makes each resample draw G groups
    with replacement, each bringing all its images; without, images are drawn.
    """
    rng = rng if rng is not None else np.random.default_rng(DEFAULT_SEED)
    if groups is None:
        return _counts(rng.integers(0, num_images, size=(resamples, num_images)), num_images)
    groups = np.asarray(groups)
    num_groups = int(groups.max()) + 1
    return _counts(rng.integers(0, num_groups, size=(resamples, num_groups)), num_groups)[:, groups]


class Resamples:
    """`resamples` bootstrap resamples of `num_images` images (of `groups`, if given), drawn with
    `seed`, handed to statistics in chunks of rows so that memory stays bounded (about 32 MB of
    weights at a time) however many images there are. Every statistic gets the same resamples:
    they are drawn once and kept (as float32 counts, up to `cache_values` of them), or drawn
    again, identically, for each statistic."""

    def __init__(self, num_images, resamples=DEFAULT_RESAMPLES, seed=DEFAULT_SEED, groups=None,
                 chunk_values=4_000_000, cache_values=50_000_000):
        self.num_images, self.resamples, self.seed, self.groups = num_images, resamples, seed, groups
        self._rows = max(1, chunk_values // max(1, num_images))
        self._cache = (list(self._draw_all()) if num_images * resamples <= cache_values else None)

    def _draw_all(self):
        for index, start in enumerate(range(0, self.resamples, self._rows)):
            rng = np.random.default_rng([self.seed, index])
            rows = min(self._rows, self.resamples - start)
            yield resample_weights(self.num_images, rows, rng, self.groups).astype(np.float32)

    def apply(self, statistic, repeat=1):
        """Returns [resamples] values of `statistic(weights)`, its weights [rows, num_images * repeat]
        (each image's weight repeated `repeat` times in a row, for pooled one-against-rest problems)."""
        rows = max(1, self._rows // repeat)
        values = []
        for chunk in self._cache if self._cache is not None else self._draw_all():
            for start in range(0, len(chunk), rows):
                weights = chunk[start:start + rows].astype(np.float64)
                values.append(statistic(np.repeat(weights, repeat, axis=1) if repeat > 1 else weights))
        return np.concatenate(values)


def figure(statistic, resamples, repeat=1):
    """Returns {'value', 'ci'} of `statistic(weights)` (see Resamples.apply) over `resamples`: value
    from every image once (None where undefined, NaN), ci the percentile_interval of the resamples
    (None when the value is undefined or no resample defines it)."""
    point = statistic(np.ones((1, resamples.num_images * repeat)))
    if np.isnan(point[0]):
        return {"value": None, "ci": None}
    return {"value": float(point[0]), "ci": percentile_interval(resamples.apply(statistic, repeat))}


def bias_corrected_figure(statistic, resamples, repeat=1):
    """Returns figure()'s {'value', 'ci'} with 'bias_corrected', for a statistic that is never below 0 and
    leans high in resamples (ECE: chance in a bin adds to its gap, and a resample adds more): the value
    less the resamples' bias (their mean less the value), and as 'ci' the basic bootstrap interval,
    [2 value - high, 2 value - low] of the resamples' percentiles; both floored at 0. On simulated
    test sets of 200 images (tests/reporting/test_calibration.py) the percentile interval of ECE
    covered the population's ECE in few draws, this one in most."""
    point = statistic(np.ones((1, resamples.num_images * repeat)))
    if np.isnan(point[0]):
        return {"value": None, "bias_corrected": None, "ci": None}
    value = float(point[0])
    values = np.asarray(resamples.apply(statistic, repeat), np.float64)
    values = values[~np.isnan(values)]
    interval = percentile_interval(values)
    if interval is None:
        return {"value": value, "bias_corrected": None, "ci": None}
    low, high = interval
    return {"value": value, "bias_corrected": max(0.0, 2 * value - float(values.mean())),
            "ci": [max(0.0, 2 * value - high), max(0.0, 2 * value - low)]}


def percentile_interval(values, confidence=CONFIDENCE):
    """Returns [low, high], the central `confidence` percentile interval of the resampled `values`
    (NaN for resamples where the statistic is undefined are left out), or None if all are NaN."""
    values = np.asarray(values, np.float64)
    values = values[~np.isnan(values)]
    if values.size == 0:
        return None
    tail = 100 * (1 - confidence) / 2
    low, high = np.percentile(values, [tail, 100 - tail])
    return [float(low), float(high)]


def weighted_rate(weights, hits, among):
    """Returns per resample sum(w * hits * among) / sum(w * among) (NaN where nothing is `among`)."""
    among = np.asarray(among, np.float64)
    denominator = weights @ among
    numerator = weights @ (np.asarray(hits, np.float64) * among)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denominator > 0, numerator / np.where(denominator > 0, denominator, 1), np.nan)


def weighted_auc(weights, scores, positive):
    """Returns per row of `weights` the ROC AUC of `scores` for the `positive` mask: the weighted
    share of (positive, negative) pairs the positive scores above, ties counted as half
    (NaN where a row has no positive or no negative weight)."""
    weights = np.atleast_2d(np.asarray(weights, np.float64))
    scores, positive = np.asarray(scores, np.float64), np.asarray(positive, bool)
    order = np.argsort(scores, kind="stable")
    sorted_scores = scores[order]
    starts = np.flatnonzero(np.r_[True, sorted_scores[1:] != sorted_scores[:-1]])  # each distinct score
    w = weights[:, order]
    pos_w = np.add.reduceat(w * positive[order], starts, axis=1)  # [rows, distinct scores]
    neg_w = np.add.reduceat(w * ~positive[order], starts, axis=1)
    neg_below = np.cumsum(neg_w, axis=1) - neg_w
    pairs = pos_w.sum(1) * neg_w.sum(1)
    wins = (pos_w * (neg_below + 0.5 * neg_w)).sum(1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(pairs > 0, wins / np.where(pairs > 0, pairs, 1), np.nan)
