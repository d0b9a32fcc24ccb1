"""The exception types for bad, missing or unobtainable data."""


class InputDataError(Exception):
    """Data that is missing, unreadable or malformed.

    The message is meant for the person running the job: it names the file or
    pattern at fault and says what to do about it.
    """


class DownloadError(InputDataError):
    """A dataset is not on disk and could not be downloaded."""
