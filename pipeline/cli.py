"""The entry point the training scripts call: flags in, run loop, one-line errors out."""
import sys

import tensorflow as tf

from pipeline import run_loop
from pipeline.errors import USER_ERRORS
from pipeline.flags import build_parser

# Runtime errors that come from the files a run reads or writes, not from a bug.
_FILE_ERRORS = (tf.errors.DataLossError, tf.errors.NotFoundError, tf.errors.PermissionDeniedError)


def main(task, argv=None):
    """Parses `argv` for `task`, runs it and returns the process exit code.

    Bad input ends in one line on stderr naming the problem and exit code 1;
    checkpoints and results already written are left as they are.
    """
    parser = build_parser(task)
    args = parser.parse_args(argv)
    try:
        run_loop.run(task, args)
    except USER_ERRORS as e:
        print(f"{parser.prog}: error: {e}", file=sys.stderr)
        return 1
    except _FILE_ERRORS as e:
        print(f"{parser.prog}: error: {e.message.splitlines()[0]}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{parser.prog}: interrupted; the latest checkpoint in {args.model_dir} is kept: "
              "run the same command to resume", file=sys.stderr)
        return 130
    return 0
