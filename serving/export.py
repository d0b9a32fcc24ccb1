"""Exports that serve: a SavedModel whose signature returns, for each image, the class
probabilities and the predicted class name, so a TF Serving or saved_model_cli client
needs nothing else."""
import contextlib
import glob
import json
import logging
import os
import shutil
import tempfile

import tensorflow as tf

from acquisition import storage
from input_fns.decode import DECODE_FILE, FORBIDDEN_VIEWS_FILE

log = logging.getLogger(__name__)

PROBABILITIES = "probabilities"
CLASS_NAME = "class_name"
CLASS_NAMES_FILE = "class_names.txt"  # in the export's assets.extra, for readers of the folder
# Copied last into an export on a URL (gs://...): readers take no export there without it.
COMPLETE_MARKER = "export_complete"
# In assets.extra: the checkpoint exported, and its index's sha256 (the index holds each tensor's checksum).
SOURCE_FILE = "exported_checkpoint.txt"


def with_class_names(spec, probabilities, class_names):
    """Returns the PREDICT EstimatorSpec `spec` of a softmax model whose output is `probabilities`,
    answering with PROBABILITIES and CLASS_NAME, the name of the most probable class, in its
    predictions and in its serving signature."""
    names = tf.gather(tf.constant(list(class_names)), tf.argmax(probabilities, axis=-1))
    predictions = {PROBABILITIES: probabilities, CLASS_NAME: names}
    return spec._replace(predictions=predictions, export_outputs={
        tf.saved_model.DEFAULT_SERVING_SIGNATURE_DEF_KEY: tf.estimator.export.PredictOutput(predictions)})


def softmax_logits(probabilities):
    """Returns the input of the softmax that gives the tensor `probabilities` (through Identity and Cast
    ops: a mixed-precision model casts its softmax's output), or None when no softmax gives them."""
    tensor = probabilities
    while tensor.op.type in ("Identity", "Cast") and tensor.op.inputs:
        tensor = tensor.op.inputs[0]
    return tensor.op.inputs[0] if tensor.op.type == "Softmax" else None


def read_class_names(path):
    """Returns the class names listed in the file `path` (an export's class_names.txt), one a line, exactly as the
    run's class folders named them: a leading or trailing space is part of a name."""
    return [line for line in storage.read_text(path).splitlines() if line]


def export_model(estimator, serving_input_fn, class_names, export_base, checkpoint_path=None, extra_assets=None):
    """Exports the checkpoint `checkpoint_path` (default: the estimator's latest) under `export_base`
    with the class names, how it decodes image files (DECODE_FILE, when `serving_input_fn` says: see
    input_fns.decode.ServingInputFn) and `extra_assets` ({file name: text}) in assets.extra; returns the
    export's path.

    A local export is written in a temporary folder and renamed when whole (the
    Estimator's way). A folder's rename is not atomic on GCS or S3 (a copy of each
    object) and empties the folder on ram:// (TF 2.15), so under a URL the export is
    written locally, then copied file by file, COMPLETE_MARKER last (see is_complete).
    """
    checkpoint_path = checkpoint_path or estimator.latest_checkpoint()
    texts = {CLASS_NAMES_FILE: "\n".join(class_names) + "\n"}
    if checkpoint_path:  # (none: the Estimator's own error follows)
        texts[SOURCE_FILE] = exported_checkpoint(checkpoint_path)
    if hasattr(serving_input_fn, "decode"):
        texts[DECODE_FILE] = serving_input_fn.decode + "\n"
    if getattr(serving_input_fn, "forbidden_views", None):
        texts[FORBIDDEN_VIEWS_FILE] = json.dumps(serving_input_fn.forbidden_views, indent=1) + "\n"
    texts.update(extra_assets or {})
    kept = SOURCE_FILE in texts and same_export(export_base, texts)
    if kept:  # a run stopped after this export, before its record of it, is relaunched
        log.info("kept the export of %s already at %s", os.path.basename(checkpoint_path), kept)
        return storage.absolute(kept)
    with tempfile.TemporaryDirectory() as tmp:
        assets = {}
        for name, text in texts.items():
            assets[name] = os.path.join(tmp, name)
            with open(assets[name], "w") as f:
                f.write(text)
        remote = storage.is_url(export_base)
        target = os.path.join(tmp, "export") if remote else export_base
        with _temp_folders_removed_if_interrupted(target):
            path = estimator.export_saved_model(target, serving_input_fn, assets_extra=assets,
                                                checkpoint_path=checkpoint_path)
        path = path.decode() if isinstance(path, bytes) else path
        if remote:
            with open(os.path.join(path, COMPLETE_MARKER), "w") as f:
                f.write("every file of this export is copied\n")
            path = storage.copy_tree(path, storage.join(export_base, os.path.basename(path)), last=COMPLETE_MARKER)
    log.info("exported the model to %s", path)
    return storage.absolute(path)


def exported_checkpoint(checkpoint_path):
    """Returns SOURCE_FILE's text for an export of `checkpoint_path`: its name and its index file's sha256."""
    return f"{os.path.basename(checkpoint_path)} {storage.sha256(checkpoint_path + '.index')}\n"


def newest_export(export_base):
    """Returns the newest whole export (timestamped folder) under `export_base`, or None: the one predict.py
    serves. On a URL, exports still being copied (without their completion marker) are passed over."""
    if not storage.isdir(export_base):
        return None
    versions = sorted((n for n in storage.listdir(export_base) if n.isdigit()), key=int, reverse=True)
    return next((storage.join(export_base, n) for n in versions if is_whole(storage.join(export_base, n))), None)


def same_export(export_base, texts):
    """Returns newest_export(export_base) when its assets.extra holds exactly `texts` ({file name: text},
    SOURCE_FILE's among them: the same checkpoint), or None. An older one that matches is not kept: predict.py
    serves a model dir's newest export, which results.json must name."""
    export_dir = newest_export(export_base)
    assets = export_dir and storage.join(export_dir, "assets.extra")
    if assets and storage.isdir(assets) and sorted(storage.listdir(assets)) == sorted(texts) and all(
            storage.read_text(storage.join(assets, n)) == text for n, text in texts.items()):
        return export_dir
    return None


@contextlib.contextmanager
def _temp_folders_removed_if_interrupted(export_base):
    """Removes the `temp-*` folder an export under the local `export_base` began when the block fails (a stop
    signal, a full disk): the Estimator writes an export there and renames it only when whole. (A kill -9's
    is removed by the next run: pipeline.model_dir.remove_leftovers.)"""
    def temp_folders():
        return set(glob.glob(os.path.join(glob.escape(export_base), "temp-*")))
    before = temp_folders()
    try:
        yield
    except BaseException:
        for leftover in temp_folders() - before:
            shutil.rmtree(leftover, ignore_errors=True)
        raise


def is_whole(export_dir):
    """Returns whether `export_dir` holds a whole export: its saved_model.pb, and is_complete."""
    return storage.isfile(storage.join(export_dir, "saved_model.pb")) and is_complete(export_dir)


def is_complete(export_dir):
    """Returns whether the export at `export_dir` is whole: a local one always (it was renamed into
    place), one on a URL when its COMPLETE_MARKER is there (copied last)."""
    return not storage.is_url(export_dir) or storage.exists(storage.join(export_dir, COMPLETE_MARKER))
