"""The image files a run could not decode though their headers read well (see acquisition.undecodable),
remembered in its model dir: the runs after it read them as bad files, so that --on-bad-image skip leaves them
out, and no run decodes every image again to find them."""
import contextlib
import hashlib
import json
import os

from acquisition import locks, storage
from acquisition.files import write_json_atomically


def remember(record_path, found):
    """Adds `found` ({file: TensorFlow's words, or None}) to the record at `record_path` (JSON), each local
    file with its size and a digest of its bytes, which tell a file replaced since; returns `record_path`.
    Cluster tasks that fail together add theirs one at a time (a lock beside a local record)."""
    entries = {os.path.abspath(f): {"size": os.path.getsize(f), "sha256": _digest(f), "words": words}
               for f, words in found.items() if not storage.is_url(f)}
    with _held(record_path):
        return write_json_atomically(record_path, {"files": {**_read_record(record_path), **entries}})


@contextlib.contextmanager
def _held(record_path):
    """Holds the lock beside the local record at `record_path` for the block, and removes it after: a task's
    read-add-write would otherwise drop what another wrote in between. (A record at a URL has no lock.)"""
    if storage.is_url(record_path):
        yield
        return
    lock = record_path + ".lock"
    fd = locks.acquire(lock, wait=True)
    try:
        yield
    finally:
        locks.release_and_remove(fd, lock)


def remembered(record_path):
    """Returns {file: the problem's words} of the files the record at `record_path` names that hold the bytes
    they held when a run failed to decode them, or are gone (a file replaced since is read again, even one
    restored with its size and time); {} without a record, and for a damaged one."""
    found = {}
    for f, was in _read_record(record_path).items():
        try:
            same = os.path.getsize(f) == was.get("size") and _digest(f) == was.get("sha256")
        except OSError:  # gone (or a path through a file): no image to train on either
            same = True
        if same:
            found[f] = (f"cannot be decoded ({was.get('words') or 'TensorFlow refused it'}), though its header reads "
                        f"well (a run of this model dir met it: {record_path}); replace or remove it")
    return found


def _digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _read_record(record_path):
    """Returns {absolute path: {'size', 'sha256', 'words'}} of the record at `record_path`; {} without one, and
    for a damaged one (the next failure finds the files again), entries not of that form left out."""
    try:
        files = json.loads(storage.read_text(record_path)).get("files")
    except (OSError, ValueError, AttributeError):  # none, unreadable, or not JSON of that form
        return {}
    if not isinstance(files, dict):
        return {}
    return {f: was for f, was in files.items() if isinstance(f, str) and isinstance(was, dict)}
