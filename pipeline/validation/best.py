"""Keeping the best model: its checkpoint copied to <model dir>/best, out of --keep-checkpoints'
rotation, and exported at once; the copies and exports it supersedes removed."""
import os

from acquisition import faults, storage

BEST_DIR = "best"  # the best checkpoint's copy, beside the rotating ones
BEST_EXPORT_DIR = "export"  # where the export of a run without validation goes: predict.py finds it the same way


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
    path (None: no export)."""

    def __init__(self, model_dir, export=None):
        self._model_dir, self._export = model_dir, export

    def keep(self, evaluation, checkpoint):
        """Copies `checkpoint` to <model dir>/best and exports it; returns the new best's record."""
        best_dir = storage.join(self._model_dir, BEST_DIR)
        storage.makedirs(best_dir)
        name = os.path.basename(checkpoint)
        for file in storage.listdir(self._model_dir):
            if file.startswith(name + "."):
                storage.copy_file(storage.join(self._model_dir, file), storage.join(best_dir, file + ".tmp"))
                storage.rename(storage.join(best_dir, file + ".tmp"), storage.join(best_dir, file))
                faults.point("best_copy")
        kept = storage.join(best_dir, name)
        faults.point("best_export")
        export_dir = self._export(kept) if self._export else None
        return {**evaluation, "checkpoint": storage.absolute(kept), "export_dir": export_dir}

    def remove_superseded(self, best):
        """Removes what `best` (the recorded best) superseded: see remove_superseded."""
        remove_superseded(self._model_dir, best)


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
