"""Log set-up: the job's progress on stderr, TensorFlow's own chatter filtered out."""
import logging
import re
import sys
import warnings

import tensorflow as tf

# TensorFlow's INFO lines worth a person's attention during a run; the rest
# (graph building, hooks, session creation) shows with --verbose.
_TF_PROGRESS = re.compile(
    r"^(Saving checkpoints for|Restoring parameters from|"
    r"Loss for final step|Saving dict for global step|Skipping training)")


# Per-class figures in the Estimator's evaluation line: in TensorBoard and results.json instead.
_PER_CLASS = re.compile(r", (precision|recall)/[^=]+= [-+.\deE]+")


class _ProgressOnly(logging.Filter):
    """Keeps errors and progress; drops the rest, the TF 1 API deprecation warnings
    the Estimator itself triggers among them."""

    def filter(self, record):
        message = record.getMessage()
        if message.startswith("Saving dict for global step"):
            record.msg, record.args = _PER_CLASS.sub("", message), None
        return record.levelno >= logging.ERROR or bool(_TF_PROGRESS.match(message))


class _CurrentStderr(logging.StreamHandler):
    """A StreamHandler on sys.stderr as it is when each record is written, as print(file=sys.stderr)
    writes the run's one-line errors: a process that runs several jobs (pipeline.cli.train_main called
    in turn) and swaps sys.stderr between them gets every line where it points now, never in a stream
    an earlier run saw and its owner has closed since ('--- Logging error ---' and a traceback)."""

    def __init__(self):
        logging.Handler.__init__(self)

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):
        pass  # always the current sys.stderr


def configure_logging(verbose=False):
    """Sends the job's and TensorFlow's log records to stderr with timestamps.

    Without `verbose`, TensorFlow's INFO records are reduced to training
    progress (loss, steps/sec, checkpoints) and its errors.
    """
    root = logging.getLogger()
    if not any(getattr(h, "_pipeline", False) for h in root.handlers):
        handler = _CurrentStderr()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname).1s %(message)s", "%H:%M:%S"))
        handler._pipeline = True
        root.addHandler(handler)
    root.setLevel(logging.INFO)
    logging.getLogger("matplotlib").setLevel(logging.WARNING)  # its font cache's INFO line in a fresh HOME
    tf_logger = tf.get_logger()
    tf_logger.handlers = []
    tf_logger.propagate = True
    tf_logger.setLevel(logging.INFO)
    for f in list(tf_logger.filters):
        tf_logger.removeFilter(f)
    if not verbose:
        tf_logger.addFilter(_ProgressOnly())
        # Keras and tf.data warn about their own TF 1 code paths that the Estimator uses.
        warnings.filterwarnings("ignore", category=UserWarning, module=r"(keras|tensorflow)\.")
