"""Reports beside the run loop: the clinical figures of a test evaluation (clinical.py, pure
NumPy), their bootstrap intervals (bootstrap.py), and the files and plots that carry them
(files.py), which pipeline/test_report.py wires to an evaluation; a run's settings and
figures for TensorBoard's HParams dashboard (hparams.py); and a table of many runs
(compare.py). This module imports no TensorFlow, so command lines can name its error."""


class RunsError(Exception):
    """A folder given to compare runs holds no finished run; the message says what to pass."""
