"""Serving a trained model: its export, whose signature answers with probabilities and class
names, and a client that classifies image files with an export."""

TFLITE_DIR = "tflite"  # <model dir>/export/tflite/<export timestamp>/: beside the export folders


class ExportNotFoundError(Exception):
    """No exported model where one was named; the message says where to find one."""


class ViewsUnavailableError(Exception):
    """--tta asked of an export that takes no pixels, from which the views are made: exit 2, as a flag
    the model cannot serve."""
    exit_code = 2


class ConversionError(Exception):
    """An export that TFLite cannot convert; the message says which run can be converted."""
