"""Standard output's reader: whether it has closed the pipe (`... | head`), and stdout quieted when it has."""
import os
import select
import sys


def stdout_closed():
    """Returns whether stdout is a pipe whose reader has closed it (poll says POLLERR)."""
    try:
        poll = select.poll()
        poll.register(sys.stdout.fileno(), select.POLLERR)
        return any(events & select.POLLERR for _, events in poll.poll(0))
    except (OSError, ValueError, AttributeError):  # no file descriptor (captured output), or no poll
        return False


def silence_stdout():
    """Points stdout at /dev/null: Python flushes it again at exit, into the closed pipe."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
