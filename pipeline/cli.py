"""The entry point the training scripts call: flags in, run loop, one-line errors out."""
import os
import sys

import tensorflow as tf

from pipeline import run_loop
from pipeline.errors import USER_ERRORS
from pipeline.flags import build_parser
from pipeline.stopping import Interrupted

_DISK_FULL = ("No space left on device", "File too large", "Disk quota exceeded")
# Runtime errors that come from the files a run reads or writes, not from a bug.
_FILE_ERRORS = (tf.errors.DataLossError, tf.errors.NotFoundError, tf.errors.PermissionDeniedError)


def main(task, argv=None):
    """Parses `argv` for `task`, runs it and returns the process exit code.

    Bad input ends in one line on stderr naming the problem and exit code 1;
    checkpoints and results already written are left as they are. SIGINT and
    SIGTERM end in one line saying what was saved and exit code 130 or 143.
    """
    parser = build_parser(task)
    args = parser.parse_args(argv)
    try:
        run_loop.run(task, args)
    except USER_ERRORS as e:
        print(f"{parser.prog}: error: {e}", file=sys.stderr)
        return 1
    except OSError as e:  # writing results, an export's assets, a download, a conversion
        print(f"{parser.prog}: error: {_io_failure(e.strerror or str(e), e.filename, args.model_dir)}", file=sys.stderr)
        return 1
    except tf.errors.OpError as e:
        full = [line.strip() for line in e.message.splitlines() if any(words in line for words in _DISK_FULL)]
        if full:
            print(f"{parser.prog}: error: {_io_failure(full[0], None, args.model_dir)}", file=sys.stderr)
            return 1
        if "Restoring from checkpoint failed" in e.message:  # Saver.restore's words for a graph mismatch
            detail = next((line for line in e.message.splitlines() if "shape" in line.lower()), "")
            print(f"{parser.prog}: error: the checkpoint in {args.model_dir} does not fit the model these flags "
                  f"build{f' ({detail.strip()[:200]})' if detail else ''}; resume with the flags it was trained "
                  "with (the same --image-size, say), or pass another --model-dir", file=sys.stderr)
            return 1
        if not isinstance(e, _FILE_ERRORS):
            raise
        print(f"{parser.prog}: error: {e.message.splitlines()[0]}", file=sys.stderr)
        return 1
    except Interrupted as e:
        print(f"{parser.prog}: {_interrupted_message(e, args.model_dir)}", file=sys.stderr)
        return e.exit_code
    return 0


def _io_failure(what, filename, model_dir):
    where = f" ({filename})" if filename else ""
    return (f"a write failed: {what}{where}; free some space (or fix the folder) and run the same command: it "
            f"resumes from the latest whole checkpoint in {model_dir}, and the next run removes what this one "
            "left half-written")


def _interrupted_message(interrupted, model_dir):
    if interrupted.saved_at_step is not None:
        return (f"{interrupted} at global step {interrupted.saved_at_step}; checkpoint saved in {model_dir}: "
                "run the same command to resume")
    latest = tf.train.latest_checkpoint(model_dir)  # stopped before or after training: nothing new to save
    if latest:
        return (f"{interrupted}; the latest checkpoint, {os.path.basename(latest)}, is kept in {model_dir}: "
                "run the same command to resume")
    return f"{interrupted} before any checkpoint was written"
