"""Test-time augmentation (--tta) in the test evaluation: the chosen checkpoint evaluated once per view
(input_fns.views), each test image's probabilities averaged over the views, and accuracy and loss
computed again from the averages; what the header, results.json, the report and the summary say of it.

Validation during training never averages: it chooses the model as a run without --tta would.
"""
import logging
import types

import numpy as np

from hooks.scores import ScoreCollectorHook
from input_fns import CROP_FRACTION, CROP_VIEWS
from input_fns.views import view_input_fn
from pipeline import evaluation_report
from pipeline.metrics import CROSS_ENTROPY, EPSILON

log = logging.getLogger(__name__)


def accuracy_and_loss(probabilities, labels):
    """Returns (accuracy, mean cross-entropy) of `probabilities` [n, classes] against class indices
    `labels` [n], each probability clipped to [EPSILON, 1 - EPSILON] as Keras' loss clips it."""
    probabilities, labels = np.asarray(probabilities, np.float64), np.asarray(labels, int)
    picked = np.clip(probabilities[np.arange(len(labels)), labels], EPSILON, 1 - EPSILON)
    return float(np.mean(probabilities.argmax(axis=1) == labels)), float(-np.mean(np.log(picked)))


def _check_same_images(first, other, view):
    """Raises RuntimeError unless `other` (a view's scores) holds `first`'s images in `first`'s order."""
    if len(other.labels) != len(first.labels) or not np.array_equal(other.labels, first.labels):
        raise RuntimeError(f"the {view} view's evaluation scored other images, or in another order")
    if first.named and other.keys != first.keys:
        raise RuntimeError(f"the {view} view's evaluation scored other files, or in another order")


def average(collectors):
    """Returns {view: ScoreCollectorHook} (`collectors`, the same images in the same order under each
    view) as one collector-like object whose probabilities are the views' mean."""
    (first_view, first), *others = collectors.items()
    for view, other in others:
        _check_same_images(first, other, view)
    mean = np.mean([c.probabilities for c in collectors.values()], axis=0)
    return types.SimpleNamespace(probabilities=mean, labels=first.labels, keys=first.keys, named=first.named)


def evaluate(estimator, input_fn, views, checkpoint_path=None):
    """Returns (metrics, scores, {view: {'accuracy', 'loss'}} or None) of the test evaluation of
    `checkpoint_path` (None: the latest): with no `views`, evaluation_report.evaluate's; else one
    evaluation per view (the identity's as the plain one, the others under eval_tta_<view>) and the
    metrics' accuracy and loss computed from the averaged probabilities, which `scores` holds."""
    metrics, identity = evaluation_report.evaluate(estimator, input_fn, checkpoint_path)
    if not views:
        return metrics, identity, None
    collectors = {views[0]: identity}
    for view in views[1:]:
        log.info("test-time augmentation: evaluating the %s view", view)
        collectors[view] = ScoreCollectorHook()
        estimator.evaluate(view_input_fn(input_fn, view), hooks=[collectors[view]], checkpoint_path=checkpoint_path,
                           name=f"tta_{view}")
    scores = average(collectors)
    figures = {}
    for view, collector in collectors.items():
        accuracy, loss = accuracy_and_loss(collector.probabilities, collector.labels)
        figures[view] = {"accuracy": accuracy, "loss": loss}
    metrics = dict(metrics)
    metrics["accuracy"], metrics[CROSS_ENTROPY] = accuracy_and_loss(scores.probabilities, scores.labels)
    return metrics, scores, figures


def results_fields(views, figures):
    """Returns results.json's fields of --tta: 'tta' (the views averaged, [] without), and with views
    'tta_views' (each view's own accuracy and loss) and 'tta_crop_fraction' when crops are among them."""
    if not views:
        return {"tta": []}
    fields = {"tta": list(views), "tta_views": {v: {k: round(x, 6) for k, x in f.items()} for v, f in figures.items()}}
    if any(v in CROP_VIEWS for v in views):
        fields["tta_crop_fraction"] = CROP_FRACTION
    return fields


def untrained_flip(views, augment):
    """Returns one line when --tta averages a flipped view of a model trained without --augment's flip (the
    (name, value) pairs `augment`): a mirrored image is one it never saw, and docs/generalisation.md
    measured such a flip costing the Fashion sample 5.6 points of test accuracy; else None."""
    flips = [v for v in views if v.startswith("flip")]
    if not flips or any(name == "flip" for name, _ in augment or ()):
        return None
    return (f"--tta {'+'.join(flips)}: the model trains without --augment flip, so the mirrored view is an image "
            "it never saw (docs/generalisation.md: it cost the Fashion sample 5.6 points of test accuracy); "
            "train with --augment flip, or test with --tta crops")


def describe(views):
    """Returns the views in words: 'the mean of 2 views: identity, flip', or 'none'."""
    if not views:
        return "none"
    crops = f" (crops of {CROP_FRACTION:g} of each side)" if any(v in CROP_VIEWS for v in views) else ""
    return f"the mean of {len(views)} views: {', '.join(views)}{crops}"


def header_line(settings):
    """Returns the run header's line of --tta ('' without it)."""
    views = getattr(settings, "tta", ())
    return (f"  test TTA:      {describe(views)} (the test evaluation only; validation never averages)\n"
            if views else "")
