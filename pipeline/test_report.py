"""The test evaluation's per-image scores and the clinical report made from them.

`evaluate` runs the Estimator's evaluation with a ScoreCollectorHook, so the
report's figures come from the very evaluation that gives eval_accuracy (no
second pass over the test images). `write_report` then checks that every test
image was counted once and writes results.json's per-class figures and
`clinical` object, report.json, report.md, the plots (also to TensorBoard) and
test_scores.csv (see reporting/).
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
from reporting import clinical, files as report_files

log = logging.getLogger(__name__)
EVAL_SUMMARY_DIR = "eval"  # where the Estimator writes its evaluation's summaries
EXAMPLES_PER_KIND = 8  # right and wrong test images shown with their heatmaps in TensorBoard


def check_positive_classes(args, class_names):
    """Raises FlagError (exit 2) when --positive-classes names a class the data does not have."""
    unknown = [n for n in args.positive_classes or () if n not in (class_names or ())]
    if unknown:
        raise FlagError(f"--positive-classes names {', '.join(unknown)}, not a class of this data; "
                        f"the classes are {', '.join(class_names or ())}")


def evaluate(estimator, input_fn, checkpoint_path=None):
    """Returns (the evaluation's metrics, the ScoreCollectorHook holding every image's scores)."""
    collector = ScoreCollectorHook()
    return estimator.evaluate(input_fn, hooks=[collector], checkpoint_path=checkpoint_path), collector


def _check_counted_once(collector, data):
    n = len(collector.labels)
    if n != data.num_eval_examples:
        raise RuntimeError(f"the evaluation scored {n} images of the {data.num_eval_examples} test images")
    if data.eval_labels is not None:
        expected = collections.Counter(int(l) for l in data.eval_labels)
        if collections.Counter(int(l) for l in collector.labels) != expected:
            raise RuntimeError("the evaluation's labels are not the test split's")
    if len(set(collector.keys)) != n:
        raise RuntimeError("the evaluation scored some test images more than once")


def write_report(task, args, data, collector, model_dir, step, export_dir=None):
    """Returns results.json's per-class figures ('confusion_matrix', 'per_class'), 'clinical' and
    'test_examples', from the scores `collector` gathered; writes the report files into
    `model_dir` and the plots to its TensorBoard evaluation folder at global step `step`, with
    heatmaps of up to 8 right and 8 wrong test images from `export_dir` (see write_examples)."""
    _check_counted_once(collector, data)
    probabilities, labels, keys = collector.probabilities, collector.labels, collector.keys
    groups, pattern = None, None
    if task.group_pattern and collector.named:
        pattern = task.group_pattern
        groups, num_groups, unmatched = clinical.group_ids(keys, pattern)
        if unmatched:
            log.warning("%d test file names do not match %s: each is a group of its own", unmatched, pattern)
    report = clinical.clinical_report(
        probabilities, labels, list(data.class_names), groups=groups, positive_classes=args.positive_classes,
        at_specificity_target=args.at_specificity, resamples=args.bootstrap_resamples, seed=args.bootstrap_seed,
        group_pattern=pattern)
    pngs = report_files.write_report_files(model_dir, report, probabilities, labels, keys)
    write_images(storage.join(model_dir, EVAL_SUMMARY_DIR), pngs, step)
    results = classification_report(labels, probabilities.argmax(axis=1), data.class_names)
    results["clinical"] = report
    if export_dir and collector.named:  # the test images are files (not Fashion-MNIST's records)
        results["test_examples"] = write_examples(export_dir, collector, model_dir, step, args.bootstrap_seed)
    return results


def write_examples(export_dir, collector, model_dir, step, seed, per_kind=EXAMPLES_PER_KIND, max_side=256):
    """Writes to TensorBoard up to `per_kind` right and `per_kind` wrong test images (drawn with
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
    write_images(storage.join(model_dir, EVAL_SUMMARY_DIR), pngs, step, prefix="test_report/examples/")
    return examples


def png_size(png):
    """Returns (width, height) read from a PNG's header."""
    return struct.unpack(">II", png[16:24])


def write_images(summary_dir, pngs, step, prefix="test_report/"):
    """Writes each PNG of {name: bytes} to TensorBoard's images under `summary_dir` at `step`."""
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
        writer = tf.compat.v1.summary.FileWriter(summary_dir, filename_suffix=f".test_report.{uuid.uuid4().hex[:8]}")
        writer.add_summary(tf.compat.v1.Summary(value=values), step)
        writer.close()


def _interval(figure):
    value, ci = figure["value"], figure["ci"]
    return "n/a" if value is None else f"{value:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")


def print_headline(results, model_dir):
    """Prints the clinical report's accuracy and referral figures with their intervals, if results has one."""
    report = results.get("clinical")
    if not report:
        return
    boot = report["bootstrap"]
    lines = [f"  report:  accuracy {_interval(report['accuracy'])} (95% bootstrap interval, {boot['resamples']} "
             f"resamples of {boot['groups']} {'groups' if boot['unit'] == 'group' else 'images'})"]
    referral = report.get("referral")
    if referral and referral.get("sensitivity"):
        auc = _interval(referral["auc"]) if referral["auc"] else "n/a"
        lines.append(f"           referral {'+'.join(referral['positive_classes'])}: sensitivity "
                     f"{_interval(referral['sensitivity'])}, specificity "
                     f"{_interval(referral['specificity']) if referral['specificity'] else 'n/a'}, AUC {auc}")
    lines.append(f"           {storage.join(model_dir, report_files.REPORT_MD)}")
    print("\n".join(lines), flush=True)
