"""The flock lock of a local model dir: one holder at a time, through a holder that removes the file."""
import os
import threading
import time

import pytest

from acquisition import locks


def waiting(path, caplog):
    """Returns (thread, {'fd': ...} once it has the lock) of a waiter that has opened the lock file at `path`
    and waits in flock."""
    got = {}
    caplog.set_level("INFO", logger=locks.__name__)
    waiter = threading.Thread(target=lambda: got.update(fd=locks.acquire(path, wait=True)), daemon=True)
    waiter.start()
    deadline = time.monotonic() + 30
    while "waiting for" not in caplog.text:
        assert time.monotonic() < deadline, "the waiter never waited"
        time.sleep(0.01)
    return waiter, got


def test_a_waiter_on_a_lock_file_its_holder_removed_locks_the_file_now_at_the_path(tmp_path, caplog):
    path = str(tmp_path / "lock")
    held = locks.acquire(path)
    waiter, got = waiting(path, caplog)
    locks.release_and_remove(held, path)
    waiter.join(30)
    assert not waiter.is_alive()
    assert os.fstat(got["fd"]).st_nlink == 1  # not the removed file
    assert os.fstat(got["fd"]).st_ino == os.stat(path).st_ino
    with pytest.raises(locks.LockHeld):  # so a third process is refused, not given a lock of its own
        locks.acquire(path)
    locks.release(got["fd"])


def test_a_waiter_whose_holder_removed_the_lock_s_folder_too_makes_it_again(tmp_path, caplog):
    folder = tmp_path / "downloads"  # a failed download removes its lock and the folder it made
    folder.mkdir()
    path = str(folder / "lock")
    held = locks.acquire(path)
    waiter, got = waiting(path, caplog)
    os.unlink(path)
    folder.rmdir()
    locks.release(held)
    waiter.join(30)
    assert not waiter.is_alive() and "fd" in got, "the waiter failed"
    assert os.fstat(got["fd"]).st_ino == os.stat(path).st_ino
    locks.release(got["fd"])
