"""--init-from's checks that need no TensorFlow: run before anything is imported or made, and again (for a URL,
which is read only then) by pipeline.initial_weights."""
import glob
import os

from acquisition import storage
from pipeline.errors import FlagError


def no_such_folder(init_from):
    """Returns the FlagError for an --init-from folder that does not exist."""
    return FlagError(f"--init-from {init_from}: no such folder; pass the --model-dir of a run that has trained")


def check_folder(settings):
    """Raises FlagError for --init-from naming this run's own --model-dir (whether or not it has checkpoints:
    it never starts from itself) or a folder on this machine that does not exist, unless the model dir resumes
    from its own checkpoints (it reads no --init-from then: the first run's may be gone); a URL's is read
    later."""
    init_from = getattr(settings, "init_from", None)
    if not init_from:
        return
    if storage.same_folder(init_from, settings.model_dir):
        raise FlagError(f"--init-from {init_from} is this run's own --model-dir, which resumes from its own "
                        "checkpoints without it; drop --init-from, or pass another run's model dir")
    model_dir = settings.model_dir
    resumes = model_dir and not storage.is_url(model_dir) and (
        os.path.isfile(os.path.join(model_dir, "checkpoint"))  # (or checkpoints its lost checkpoint file named)
        or bool(glob.glob(os.path.join(glob.escape(model_dir), "model.ckpt-*.index"))))
    if not storage.is_url(init_from) and not os.path.isdir(init_from) and not resumes:  # (a resume does not read it)
        raise no_such_folder(init_from)
