"""Advisory file locks that name their owner and die with it.

`flock` locks are released by the kernel when the process holding them exits,
however it exits (kill -9 included), so a lock left by a dead process is never
stale. The lock file holds the owner's pid and host, for the message a waiting
or refused process prints. NFS v4 supports these locks; some network file
systems do not. A file system reached by URL has none: Lease stands in there.
"""
import contextlib
import fcntl
import json
import logging
import os
import socket
import threading
import time
import uuid

from acquisition import storage

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
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            _lock_exclusively(fd, path, wait)
            if os.fstat(fd).st_nlink:  # (0: its last holder removed the file before letting go, release_and_remove)
                os.ftruncate(fd, 0)
                os.lseek(fd, 0, os.SEEK_SET)
                os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode())
                return fd
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)  # and lock the file now at `path`
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)  # (its holder may have removed its folder too)


def _lock_exclusively(fd, path, wait):
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        if not wait:
            raise LockHeld(path, _owner(fd)) from None
        log.info("waiting for %s, which holds %s", _owner(fd), path)
        fcntl.flock(fd, fcntl.LOCK_EX)


def share(path):
    """Takes a shared hold on the lock at `path` (created if absent) for the rest of the process; returns
    its file descriptor. Many processes share it; `acquire` of the same path fails while any holds it.
    Raises LockHeld when a process holds it exclusively."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise LockHeld(path, "a process rewriting them") from None
    return fd


def held_by(path):
    """Returns who holds the lock at `path` exclusively ("pid N on HOST"), or None (free, or no such file);
    the file is only read."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _owner(fd)
    finally:
        os.close(fd)  # (releases a shared hold taken)
    return None


def release(fd):
    """Releases a lock taken by acquire()."""
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


def release_and_remove(fd, path):
    """Removes the lock file at `path`, then releases the lock taken on it by acquire(): a process that
    opened the file before it went finds it gone once it gets the lock, and locks the path anew."""
    try:
        os.unlink(path)
    finally:
        release(fd)


@contextlib.contextmanager
def exclusive(path):
    """Holds the lock at `path` for the duration of the block, waiting for it if needed."""
    fd = acquire(path, wait=True)
    try:
        yield
    finally:
        release(fd)


@contextlib.contextmanager
def exclusive_leaving_no_trace(path, made_folder, wait=True):
    """Holds the lock at `path` for the duration of the block, waiting for it if needed (without `wait`,
    raises LockHeld at once); then removes the lock file when it is alone in its folder, or when the block
    failed having added nothing there (a failed download beside files of the user's), and the folder too when
    `made_folder` (this process made it), so a failure leaves nothing behind. A lock beside what a block
    wrote stays: removing a file other hosts may hold open is safe on a local disk, not on every network
    file system."""
    fd = acquire(path, wait=wait)
    folder = os.path.dirname(path) or "."
    before, failed = set(os.listdir(folder)), False
    try:
        yield
    except BaseException:
        failed = True
        raise
    finally:
        now = set(os.listdir(folder))
        if now != {os.path.basename(path)} and not (failed and now <= before):
            release(fd)
        else:
            release_and_remove(fd, path)  # a process waiting on it locks the path anew (acquire)
            if made_folder:
                with contextlib.suppress(OSError):  # another process's lock or files came in meanwhile
                    os.rmdir(folder)


LEASE_SECONDS = 60.0  # a lease not renewed for this long is taken over: its owner is gone


class Lease:
    """A lock where there is no flock: a file system reached by URL (gs://, s3://, ram://).

    The lease is a small JSON file naming its owner (pid and host) with the time of its
    last heartbeat, renewed every `ttl` / 6 seconds by a daemon thread while it is held.
    Another process reads it and refuses (or, with `wait`, waits) while the heartbeat is
    younger than `ttl`; an older one is taken over: its owner stopped renewing it (died,
    lost the network). What this guarantees: a run never starts beside a live one that
    took the lease before it. What it does not: gfile has no atomic create-if-absent (GCS
    has one, ifGenerationMatch, but gfile does not use it), so two processes taking a free
    lease in the same fraction of a second could both write theirs; each reads the lease
    back after `settle` seconds and only the one whose lease stands goes on, which narrows
    that race to writes landing closer together than that. Hosts' clocks must agree (NTP)
    to well within `ttl`.
    """

    def __init__(self, path, ttl=LEASE_SECONDS, settle=0.5, clock=time.time, sleep=time.sleep):
        self.path, self.ttl, self.settle, self._clock, self._sleep = path, ttl, settle, clock, sleep
        self.owner = f"pid {os.getpid()} on {socket.gethostname()}"
        self._token = uuid.uuid4().hex
        self._stop = threading.Event()
        self._thread = None

    def _read(self):
        try:
            return json.loads(storage.read_text(self.path))
        except (OSError, ValueError):  # none, or one cut short: no lease stands
            return None
        except Exception as e:  # noqa: BLE001 - tf.errors.NotFoundError of a file removed meanwhile
            if type(e).__name__ == "NotFoundError":
                return None
            raise

    def _write(self):
        storage.write_atomically(self.path, json.dumps(
            {"owner": self.owner, "pid": os.getpid(), "host": socket.gethostname(), "token": self._token,
             "heartbeat": self._clock(), "ttl_seconds": self.ttl}) + "\n")

    def holder(self):
        """Returns the lease's live holder other than this process ("pid N on HOST, renewed S s ago"), or None."""
        held = self._read()
        if not held or held.get("token") == self._token:
            return None
        age = self._clock() - float(held.get("heartbeat", 0))
        if age >= float(held.get("ttl_seconds", self.ttl)):  # the holder's own promise to renew
            return None
        return f"{held.get('owner', 'another process')}, renewed {max(age, 0):.0f} s ago"

    def acquire(self, wait=False, poll=1.0):
        """Takes the lease (see the class); returns self. Raises LockHeld while another live process
        holds it, or with `wait` polls every `poll` seconds until it is free or stale."""
        logged = False
        while True:
            holder = self.holder()
            if holder is None:
                stale = self._read()
                if stale and stale.get("token") != self._token:
                    log.warning("taking over the lease %s of %s: not renewed for %.0f s", self.path,
                                stale.get("owner"), self._clock() - float(stale.get("heartbeat", 0)))
                self._write()
                self._sleep(self.settle)
                held = self._read()
                if held and held.get("token") == self._token:
                    break
                holder = self.holder() or "another process"
            if not wait:
                raise LockHeld(self.path, holder)
            if not logged:
                log.info("waiting for %s, which holds %s", holder, self.path)
                logged = True
            self._sleep(poll)
        self._stop.clear()
        self._thread = threading.Thread(target=self._renew, name="lease-heartbeat", daemon=True)
        self._thread.start()
        return self

    def _renew(self):
        while not self._stop.wait(self.ttl / 6):
            try:
                self._write()
            except Exception as e:  # noqa: BLE001 - the next beat tries again; the run goes on
                log.warning("could not renew the lease %s: %s", self.path, e)

    def release(self):
        """Stops renewing the lease and removes it, if it is still this process's."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        held = self._read()
        if held and held.get("token") == self._token:
            storage.remove(self.path)
