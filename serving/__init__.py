"""Serving a trained model: its export, whose signature answers with probabilities and class
names, and a client that classifies image files with an export."""


class ExportNotFoundError(Exception):
    """No exported model where one was named; the message says where to find one."""


class ConversionError(Exception):
    """An export that TFLite cannot convert; the message says which run can be converted."""
