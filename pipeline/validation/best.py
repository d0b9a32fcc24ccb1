"""Keeping the best model: its checkpoint copied to <model dir>/best, out of --keep-checkpoints'
rotation, and exported at once; the copies and exports it supersedes removed. When the report will
need them, the validation's scores of each image go beside the copy, so that the report reads them
rather than evaluating the validation split again."""
import io
import json
import logging
import os
import re
import types
import zipfile

import numpy as np

from acquisition import faults, storage
from serving import TFLITE_DIR

BEST_DIR = "best"  # the best checkpoint's copy, beside the rotating ones
BEST_EXPORT_DIR = "export"  # where the export of a run without validation goes: predict.py finds it the same way
# Beside a best checkpoint's copy (<checkpoint> + this): its validation's scores. Named after the checkpoint,
# it goes with the copy it belongs to when a newer best supersedes it.
SCORES_SUFFIX = ".validation_scores.npz"
log = logging.getLogger(__name__)


def rebased(path, model_dir):
    """Returns `path`, a best checkpoint or an export recorded as <a model dir>/best/<name> or
    <a model dir>/export/<timestamp>, under `model_dir` instead: a model dir moved or copied (renamed,
    rsynced from a cluster) reads and keeps its own files, never those at the old place. Other paths
    (and None) are returned as they are."""
    if not path:
        return path
    parent, name = os.path.split(path.rstrip("/"))
    folder = os.path.basename(parent)
    if folder not in (BEST_DIR, BEST_EXPORT_DIR):
        return path
    return storage.absolute(storage.join(model_dir, folder, name))


class BestKeeper:
    """Keeps a new best checkpoint: `export(checkpoint_path)` exports one and returns the export's
    path (None: no export). With `scores_made_with` (the settings the validation's scores depend on,
    see write_scores), the scores of each image are kept beside the copy."""

    def __init__(self, model_dir, export=None, scores_made_with=None):
        self._model_dir, self._export, self._made_with = model_dir, export, scores_made_with

    @property
    def keeps_scores(self):
        """Returns whether keep() wants the validation's scores."""
        return self._made_with is not None

    def keep(self, evaluation, checkpoint, scores=None):
        """Copies `checkpoint` to <model dir>/best, with `scores` (its validation's ScoreCollectorHook, or
        None) beside it, and exports it; returns the new best's record."""
        best_dir = storage.join(self._model_dir, BEST_DIR)
        storage.makedirs(best_dir)
        name = os.path.basename(checkpoint)
        kept = storage.join(best_dir, name)
        if storage.exists(kept + SCORES_SUFFIX):  # an earlier copy's (a run resumed from before step N)
            storage.remove(kept + SCORES_SUFFIX)
        for file in storage.listdir(self._model_dir):
            # its files alone: not those of it set aside as damaged (<file>.damaged) or left half-written
            if file.startswith(name + ".") and re.fullmatch(r"index|meta|data-\d+-of-\d+", file[len(name) + 1:]):
                storage.copy_file(storage.join(self._model_dir, file), storage.join(best_dir, file + ".tmp"))
                storage.rename(storage.join(best_dir, file + ".tmp"), storage.join(best_dir, file))
                faults.point("best_copy")
        if scores is not None and self.keeps_scores:
            write_scores(kept, scores, self._made_with)
        faults.point("best_export")
        export_dir = self._export(kept) if self._export else None
        return {**evaluation, "checkpoint": storage.absolute(kept), "export_dir": export_dir}

    def remove_superseded(self, best):
        """Removes what `best` (the recorded best) superseded: see remove_superseded."""
        remove_superseded(self._model_dir, best)


def index_digest(checkpoint):
    """Returns the SHA-256 of `checkpoint`'s index file, which names its weights' shards and checksums."""
    return storage.sha256(checkpoint + ".index")


def write_scores(checkpoint, scores, made_with):
    """Writes `scores` (a ScoreCollectorHook after an evaluation of `checkpoint`) beside `checkpoint`, with
    `made_with` (a JSON-able dict of the settings they depend on) and the checkpoint's index_digest;
    returns the file's path."""
    buffer = io.BytesIO()
    np.savez(buffer, probabilities=scores.probabilities, labels=scores.labels, keys=np.asarray(scores.keys, str),
             named=np.asarray(scores.named),
             made_with=np.asarray(json.dumps({**made_with, "checkpoint": index_digest(checkpoint)}, sort_keys=True)))
    return storage.write_atomically(checkpoint + SCORES_SUFFIX, buffer.getvalue())


def read_scores(checkpoint):
    """Returns the scores write_scores kept beside `checkpoint`, as a ScoreCollectorHook holds them
    (probabilities, labels, keys, named) and their `made_with`, or None when there are none or they
    cannot be read (warned of)."""
    path = checkpoint + SCORES_SUFFIX
    try:
        with np.load(io.BytesIO(storage.read_bytes(path)), allow_pickle=False) as kept:
            return types.SimpleNamespace(probabilities=kept["probabilities"], labels=kept["labels"],
                                         keys=[str(k) for k in kept["keys"]], named=bool(kept["named"]),
                                         made_with=json.loads(str(kept["made_with"])))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as e:
        log.warning("cannot read %s (%s): the validation split is evaluated again", path, e)
        return None


def remove_superseded(model_dir, best):
    """Removes the best checkpoints and exports that `best` (validation.json's) replaced, and those of
    a run killed before it recorded them."""
    if best is None:
        return
    keep = os.path.basename(best["checkpoint"])
    for path in storage.glob(storage.join(model_dir, BEST_DIR, "*")):
        if not os.path.basename(path).startswith(keep + "."):
            storage.remove(path)
    for path in storage.glob(storage.join(model_dir, BEST_EXPORT_DIR, "[0-9]*")):  # not an export being written
        if best.get("export_dir") and storage.absolute(path) != best["export_dir"]:
            storage.remove_tree(path)
    for path in storage.glob(storage.join(model_dir, BEST_EXPORT_DIR, TFLITE_DIR, "[0-9]*")):
        if not storage.exists(storage.join(model_dir, BEST_EXPORT_DIR, os.path.basename(path))):
            storage.remove_tree(path)  # the conversions of an export removed above (or by an earlier run)
