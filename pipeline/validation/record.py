"""validation.json, a model dir's record of validation: every evaluation ({step, validation_accuracy,
validation_loss}) and the best ({..., checkpoint, export_dir}). It is written after the best
checkpoint's copy and export are whole, so a run killed at any point leaves the recorded best intact,
and a resumed run compares with it: a worse model never replaces it."""
import json

from acquisition import storage
from acquisition.files import write_json_atomically
from pipeline.errors import UsageError
from pipeline.validation.best import rebased

VALIDATION_FILE = "validation.json"


def read_record(model_dir):
    """Returns the model dir's validation record ({'evaluations': [...], 'best': {...} or None}), the best's
    checkpoint and export under `model_dir` (see rebased)."""
    path = storage.join(model_dir, VALIDATION_FILE)
    try:
        record = json.loads(storage.read_text(path))
        best = record.get("best")
        if best:  # recorded where the model dir was when they were made
            best = {**best, "checkpoint": rebased(best["checkpoint"], model_dir),
                    "export_dir": rebased(best.get("export_dir"), model_dir)}
        return {"evaluations": list(record["evaluations"]), "best": best}
    except FileNotFoundError:
        return {"evaluations": [], "best": None}
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise UsageError(f"cannot read {path} ({getattr(e, 'strerror', None) or e}); it records the best model "
                         "so far: restore it, or pass another --model-dir") from None


def write_record(model_dir, record):
    """Writes `record` to the model dir's validation.json (atomically); returns its path."""
    return write_json_atomically(storage.join(model_dir, VALIDATION_FILE), record)


def better(evaluation, best):
    """Returns whether `evaluation` beats `best` (None: nothing yet): higher validation accuracy, or
    the same accuracy at a lower validation loss."""
    if best is None:
        return True
    return (evaluation["validation_accuracy"], -evaluation["validation_loss"]) > \
        (best["validation_accuracy"], -best["validation_loss"])
