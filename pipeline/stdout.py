"""Standard output's reader: whether it has closed the pipe (`... | head`), whether the file it goes to is on
a full disk, and stdout quieted when either has made it fail."""
import errno
import os
import select
import stat
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


def stdout_file_on_full_disk(error):
    """Returns the path of the file stdout goes to (`> out.txt`) when `error`, an OSError naming no file, is
    a full disk's and that file's disk has no space left; else None."""
    if error.errno != errno.ENOSPC or error.filename:
        return None
    try:
        fd = sys.stdout.fileno()
        if not stat.S_ISREG(os.fstat(fd).st_mode) or os.fstatvfs(fd).f_bavail:
            return None
        return os.readlink(f"/proc/self/fd/{fd}")
    except (OSError, ValueError, AttributeError):  # no file descriptor (captured output), no /proc
        return None
