"""The test evaluation's per-image scores and the clinical report made from them.

`evaluate` runs the Estimator's evaluation with a ScoreCollectorHook, so the
report's figures come from the very evaluation that gives eval_accuracy (no
second pass over the test images). `write_report` then checks that every test
image was counted once and writes results.json's per-class figures and
`clinical` object, report.json, report.md, the plots (also to TensorBoard) and
test_scores.csv (see reporting/).

The validation split's scores with the tested checkpoint are read too when a figure needs them:
those validation during training kept beside the best checkpoint, else an evaluation's. The
referral decision's threshold for --at-specificity is chosen there and applied to the test split,
and --calibrate temperature fits its temperature there (never on the test split), scales every
probability of the report by it and exports the checkpoint again, serving the scaled probabilities.
"""
import collections
import io
import logging
import os
import struct
import uuid

import numpy as np
import tensorflow as tf

from acquisition import storage
from hooks.scores import ScoreCollectorHook
from pipeline.errors import FlagError
from pipeline.metrics import classification_report
from pipeline.validation.best import BEST_EXPORT_DIR, index_digest, read_scores
from reporting import calibration, clinical, files as report_files
from serving.calibrated import export_with_temperature

log = logging.getLogger(__name__)
# Below this many validation images a fitted temperature is warned about: on the OCT sample's 10 it raised
# the test NLL in 5 seeds of 5; on 48 and 82 (generated shapes, Fashion) it lowered it in every seed.
FEW_CALIBRATION_IMAGES = 30
EVAL_SUMMARY_DIR = "eval"  # where the Estimator writes its evaluation's summaries
EVAL_ONLY_DIR = "eval_only"  # an --eval-only run's report files, beside the training run's
EXAMPLES_PER_KIND = 8  # right and wrong test images shown with their heatmaps in TensorBoard
# The report's evaluation of the validation split: TensorBoard's eval_report_validation, apart from
# the validations during training (eval_validation), which it would repeat at the tested step.
VALIDATION_EVAL_NAME = "report_validation"


def check_positive_classes(args, class_names):
    """Raises FlagError (exit 2) when --positive-classes names a class the data does not have, or every
    class (a referral decision then has no negatives to measure)."""
    unknown = [n for n in args.positive_classes or () if n not in (class_names or ())]
    if unknown:
        raise FlagError(f"--positive-classes names {', '.join(unknown)}, not a class of this data; "
                        f"the classes are {', '.join(class_names or ())}")
    if args.positive_classes and class_names and set(args.positive_classes) == set(class_names):
        raise FlagError("--positive-classes names every class, leaving no negatives to refer against; name "
                        "some of them, or 'none' for no referral decision")


def calibration_warning(args, data):
    """Returns one line when --calibrate temperature will be fitted on fewer than FEW_CALIBRATION_IMAGES
    validation images, else None."""
    images = data.num_validation_examples
    if args.calibrate != "temperature" or images >= FEW_CALIBRATION_IMAGES:
        return None
    return (f"--calibrate temperature will fit its temperature on only {images} validation images: so few can "
            "make the test probabilities worse, not better (docs/generalisation.md); hold out more "
            "(--validation-fraction) or drop --calibrate")


def check_calibration(args, data):
    """Raises FlagError (exit 2) when --calibrate temperature has no validation split to fit on or no
    test report to calibrate (synthetic data)."""
    if args.calibrate == "none":
        return
    if not data.class_names or data.source == "synthetic":  # first: no split can be held out of it either
        raise FlagError("--calibrate temperature calibrates the test report's probabilities, and synthetic data "
                        "gets no test report; drop --calibrate, or --synthetic")
    if data.validation_input_fn is None:
        raise FlagError("--calibrate temperature fits its temperature on the validation split, never the test "
                        "split, and this run has none: give it one (--validation-fraction above 0)")


def evaluate(estimator, input_fn, checkpoint_path=None):
    """Returns (the evaluation's metrics, the ScoreCollectorHook holding every image's scores)."""
    collector = ScoreCollectorHook()
    return estimator.evaluate(input_fn, hooks=[collector], checkpoint_path=checkpoint_path), collector


def _check_counted_once(collector, num_examples, expected_labels=None, split="test"):
    n = len(collector.labels)
    if n != num_examples:
        raise RuntimeError(f"the evaluation scored {n} images of the {num_examples} {split} images")
    if expected_labels is not None:
        expected = collections.Counter(int(l) for l in expected_labels)
        if collections.Counter(int(l) for l in collector.labels) != expected:
            raise RuntimeError(f"the evaluation's labels are not the {split} split's")
    if len(set(collector.keys)) != n:
        raise RuntimeError(f"the evaluation scored some {split} images more than once")


def uses_validation(args):
    """Returns whether the report evaluates the validation split: for a referral decision's threshold
    (--positive-classes) or --calibrate."""
    return bool(args.positive_classes) or args.calibrate != "none"


def scores_made_with(args, data):
    """Returns the settings a validation's scores depend on besides the checkpoint, which validation during
    training keeps with the best checkpoint's scores of each image for the report
    (pipeline.validation.best.write_scores); None when the report needs none."""
    if not (uses_validation(args) and data.class_names and data.source != "synthetic"):
        return None
    return {"precision": args.precision, "xla": bool(args.xla), "image_size": getattr(args, "image_size", None),
            "channels": getattr(args, "channels", None), "decode": getattr(args, "decode", None),
            "classes": list(data.class_names), "images": data.num_validation_examples}


def evaluate_validation(args, data, estimator, checkpoint_path):
    """Returns the validation split's scores with `checkpoint_path` (None: the latest), or None when
    there is no validation split or nothing needs it (a referral decision's threshold, --calibrate):
    those kept beside the best checkpoint when it was validated during training (see kept_scores),
    else a ScoreCollectorHook's of an evaluation now."""
    if not uses_validation(args) or data.validation_input_fn is None or estimator is None:
        return None
    kept = kept_scores(args, data, checkpoint_path) if checkpoint_path else None
    if kept is not None:
        return kept
    log.info("evaluating on %d validation images for the report's threshold and calibration",
             data.num_validation_examples)
    collector = ScoreCollectorHook()
    estimator.evaluate(data.validation_input_fn, hooks=[collector], checkpoint_path=checkpoint_path,
                       name=VALIDATION_EVAL_NAME)
    _check_counted_once(collector, data.num_validation_examples, split="validation")
    return collector


def kept_scores(args, data, checkpoint_path):
    """Returns the validation scores kept beside `checkpoint_path` when they are this evaluation's: of the
    same checkpoint (its index file), made with the same settings (scores_made_with), one row of
    finite probabilities over the classes for each validation image; else None (a difference is warned of)."""
    kept = read_scores(checkpoint_path)
    if kept is None:
        return None
    now = {**scores_made_with(args, data), "checkpoint": index_digest(checkpoint_path)}
    differs = [key for key in sorted(now) if kept.made_with.get(key) != now[key]]
    n = data.num_validation_examples
    if not differs and not (kept.probabilities.shape == (n, len(data.class_names)) and kept.labels.shape == (n,)
                            and np.isfinite(kept.probabilities).all()):
        differs = ["scores"]
    if differs:
        log.warning("the validation scores kept beside %s differ from this evaluation's (%s): the validation "
                    "split is evaluated again", checkpoint_path, ", ".join(differs))
        return None
    log.info("the report's %d validation scores: the best checkpoint's, kept from its validation", n)
    return kept


def scaled_scores(args, collector, validation):
    """Returns (the test probabilities, the validation split's (probabilities, labels) or None, the
    calibration's 'temperature' object or None): with --calibrate temperature, each probability
    scaled by the temperature fitted on the validation split (see reporting.calibration)."""
    test = (collector.probabilities, collector.labels)
    held = (validation.probabilities, validation.labels) if validation is not None else None
    if args.calibrate != "temperature":
        return test[0], held, None
    temperature = calibration.fit_temperature(*held)
    scaling = calibration.temperature_report(temperature, held, test)
    log.info("temperature scaling: T = %.4f, fitted on the validation split (NLL %.4f -> %.4f)", temperature,
             scaling["validation_nll"]["before"], scaling["validation_nll"]["after"])
    return (calibration.apply_temperature(test[0], temperature),
            (calibration.apply_temperature(held[0], temperature), held[1]), scaling)


def _groups(task, args, collector):
    """Returns (a group id per test image, the pattern: --group-by's, else the task's), or (None, None)
    when it groups none."""
    pattern = getattr(args, "group_by", None) or task.group_pattern
    if not (pattern and collector.named):
        return None, None
    groups, _, unmatched = clinical.group_ids(collector.keys, pattern)
    if unmatched:
        log.warning("%d test file names do not match %s: each is a group of its own", unmatched, pattern)
    return groups, pattern


def report_dir(args):
    """Returns the folder of the report files: the model dir; under --eval-only its EVAL_ONLY_DIR, so
    that the training run's report, the one results.json's 'clinical' holds, stays as it was."""
    return storage.join(args.model_dir, EVAL_ONLY_DIR) if args.eval_only else args.model_dir


def write_report(task, args, data, collector, step, export_dir=None, estimator=None, checkpoint_path=None):
    """Returns results.json's per-class figures ('confusion_matrix', 'per_class'), 'clinical' and
    'test_examples', from the scores `collector` gathered (and, with --calibrate temperature, the
    scaled export's 'export_dir'); writes the report files into report_dir(args) and the plots to its
    TensorBoard evaluation folder at global step `step`, with heatmaps of up to 8 right and 8 wrong
    test images from the export (see write_examples). `estimator` evaluates the validation split
    with the tested checkpoint, `checkpoint_path` (None: the latest), when the report needs it."""
    _check_counted_once(collector, data.num_eval_examples, data.eval_labels)
    validation = evaluate_validation(args, data, estimator, checkpoint_path)
    probabilities, held, scaling = scaled_scores(args, collector, validation)
    labels, keys = collector.labels, collector.keys
    groups, pattern = _groups(task, args, collector)
    report = clinical.clinical_report(
        probabilities, labels, list(data.class_names), groups=groups, positive_classes=args.positive_classes,
        at_specificity_target=args.at_specificity, resamples=args.bootstrap_resamples, seed=args.bootstrap_seed,
        group_pattern=pattern, validation=held)
    report["tta"] = list(getattr(args, "tta", ()))  # the views averaged (pipeline.tta): [] for the image alone
    results = {}
    if scaling:
        report["calibration"]["temperature"] = scaling
        if data.serving_input_fn:  # under --eval-only beside its report: predict.py serves what training exported
            results["export_dir"] = export_dir = export_with_temperature(
                estimator, data.serving_input_fn, data.class_names, storage.join(report_dir(args), BEST_EXPORT_DIR),
                scaling["temperature"], checkpoint_path)
    folder = report_dir(args)
    storage.makedirs(folder)
    pngs = report_files.write_report_files(folder, report, probabilities, labels, keys)
    # TensorBoard's images beside the report files: an --eval-only's leave the training run's as they were.
    summary_dir = storage.join(folder, EVAL_SUMMARY_DIR)
    remove_report_events(summary_dir, step)
    write_images(summary_dir, pngs, step)
    results.update(classification_report(labels, probabilities.argmax(axis=1), data.class_names))
    results["clinical"] = report
    if export_dir and collector.named:  # the test images are files (not Fashion-MNIST's records)
        results["test_examples"] = write_examples(export_dir, collector, summary_dir, step, args.bootstrap_seed)
    return results


def write_examples(export_dir, collector, summary_dir, step, seed, per_kind=EXAMPLES_PER_KIND, max_side=256):
    """Writes to TensorBoard's `summary_dir` up to `per_kind` right and `per_kind` wrong test images (drawn with
    `seed`), each with the Grad-CAM heatmap of its predicted class from the export at
    `export_dir`; returns [{'file', 'label', 'predicted', 'tag'}] of them."""
    from PIL import Image
    from serving.gradcam import GradCam, overlay
    predicted = collector.probabilities.argmax(axis=1)
    rng = np.random.default_rng(seed)
    chosen = []
    for kind, mask in (("right", predicted == collector.labels), ("wrong", predicted != collector.labels)):
        found = np.flatnonzero(mask)
        chosen += [(kind, int(i)) for i in sorted(rng.choice(found, min(per_kind, len(found)), replace=False))]
    if not chosen:
        return []
    try:
        gradcam = GradCam(export_dir)
    except ValueError as e:  # a model without a convolution
        log.warning("no heatmaps of test images in TensorBoard: %s", e)
        return []
    contents = []
    for _, i in chosen:
        contents.append(storage.read_bytes(collector.keys[i]))
    _, _, heatmaps = gradcam.explain(contents)
    gradcam.close()
    pngs, examples = {}, []
    for (kind, i), heatmap in zip(chosen, heatmaps):
        label, guess = gradcam.class_names[collector.labels[i]], gradcam.class_names[predicted[i]]
        with Image.open(io.BytesIO(storage.read_bytes(collector.keys[i]))) as image:
            image.thumbnail((max_side, max_side))
            buffer = io.BytesIO()
            Image.fromarray(overlay(image, heatmap)).save(buffer, "PNG")
        tag = f"{kind}/{len(examples):02d}_{label}_as_{guess}"
        pngs[tag] = buffer.getvalue()
        examples.append({"file": collector.keys[i], "label": label, "predicted": guess,
                         "tag": f"test_report/examples/{tag}"})
    write_images(summary_dir, pngs, step, prefix="test_report/examples/")
    return examples


def png_size(png):
    """Returns (width, height) read from a PNG's header."""
    return struct.unpack(">II", png[16:24])


def _report_events_suffix(step):
    return f".test_report.step{step}."


def remove_report_events(summary_dir, step):
    """Removes the events files write_images wrote under `summary_dir` at `step` before (a report made
    again: after a kill before results.json, or an --eval-only run again); returns their paths. The
    reports of earlier steps stay, as TensorBoard's history."""
    if not storage.isdir(summary_dir):
        return []
    stale = [storage.join(summary_dir, name) for name in storage.listdir(summary_dir)
             if name.startswith("events.out.tfevents.") and _report_events_suffix(step) in name]
    for path in stale:
        storage.remove(path)
    return stale


def write_images(summary_dir, pngs, step, prefix="test_report/"):
    """Writes each PNG of {name: bytes} to TensorBoard's images under `summary_dir` at `step`, in an
    events file of its own (see remove_report_events)."""
    values = []
    for name, png in pngs.items():
        width, height = png_size(png)
        image = tf.compat.v1.Summary.Image(encoded_image_string=png, height=height, width=width, colorspace=4)
        tag = prefix + (os.path.splitext(name)[0] if name.endswith(".png") else name)
        values.append(tf.compat.v1.Summary.Value(tag=tag, image=image))
    with tf.Graph().as_default():  # the v1 writer refuses eager mode
        # An events file is named by the second it was made and the host: without a suffix of its own,
        # one made in the same second as the evaluation's (still open in the Estimator's cache), or as
        # this function's previous one (the report's figures, then its examples), would take its name,
        # and one of the two would be lost.
        writer = tf.compat.v1.summary.FileWriter(
            summary_dir, filename_suffix=f"{_report_events_suffix(step)}{uuid.uuid4().hex[:8]}")
        writer.add_summary(tf.compat.v1.Summary(value=values), step)
        writer.close()
