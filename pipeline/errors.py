"""Errors the command lines turn into a one-line message and a non-zero exit."""
from input_fns.errors import InputDataError
from models.vgg16_transfer import WeightsUnavailableError


class UsageError(Exception):
    """A flag value or environment that the job cannot run with; the message says what to change."""


class TrainingError(Exception):
    """Training cannot go on (the loss diverged, say); the message says what to change."""


USER_ERRORS = (UsageError, InputDataError, WeightsUnavailableError, TrainingError)
