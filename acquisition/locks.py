"""Advisory file locks that name their owner and die with it.

`flock` locks are released by the kernel when the process holding them exits,
however it exits (kill -9 included), so a lock left by a dead process is never
stale. The lock file holds the owner's pid and host, for the message a waiting
or refused process prints. NFS v4 supports these locks; some network file
systems do not.
"""
import contextlib
import fcntl
import logging
import os
import socket

log = logging.getLogger(__name__)


class LockHeld(Exception):
    """Another live process holds the lock; `owner` says which ("pid N on HOST")."""

    def __init__(self, path, owner):
        super().__init__(f"{path} is held by {owner}")
        self.path, self.owner = path, owner


def _owner(fd):
    os.lseek(fd, 0, os.SEEK_SET)
    return os.read(fd, 200).decode(errors="replace").strip() or "another process"


def acquire(path, wait=False):
    """Takes the lock at `path` (created if absent); returns its file descriptor.

    Without `wait`, raises LockHeld at once when another process holds it; with
    `wait`, logs who holds it and blocks until it is free. The lock lasts until
    release(fd) or the end of the process.
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not wait:
                raise LockHeld(path, _owner(fd)) from None
            log.info("waiting for %s, which holds %s", _owner(fd), path)
            fcntl.flock(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode())
        return fd
    except BaseException:
        os.close(fd)
        raise


def release(fd):
    """Releases a lock taken by acquire()."""
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


@contextlib.contextmanager
def exclusive(path):
    """Holds the lock at `path` for the duration of the block, waiting for it if needed."""
    fd = acquire(path, wait=True)
    try:
        yield
    finally:
        release(fd)
