"""The one exception type input functions raise for bad or missing data."""


class InputDataError(Exception):
    """Data that is missing, unreadable or malformed.

    The message is meant for the person running the job: it names the file or
    pattern at fault and says what to do about it.
    """
