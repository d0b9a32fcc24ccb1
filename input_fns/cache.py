"""tf.data cache files on disk, named by what they hold.

A cache is keyed by everything that decides its content (the files and their
sizes and times, the shard, image size, decode mode), so a cache of other data
is never read back. A complete cache is reused; an incomplete one (a run killed
during its first epoch leaves tf.data's lockfile and temporary state) is
removed and written anew by the one process that holds its lock.
"""
import glob
import hashlib
import json

from acquisition import locks, storage
from acquisition.errors import InputDataError

_FORMAT = 1
_held = {}  # cache file -> lock descriptor (a locks.Lease on a URL), held until this process ends


def cache_key(fields):
    """Returns a short hex key of the JSON-serialisable `fields`."""
    text = json.dumps({"format": _FORMAT, **fields}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _escape(path):
    return path if storage.is_url(path) else glob.escape(path)  # a URL's cache names hold no wildcard


def is_complete(path):
    """Returns True when tf.data finished writing the cache `path` (its index exists, no writer's lockfile)."""
    return storage.isfile(path + ".index") and not storage.glob(_escape(path) + "_*.lockfile")


def _remove_leftovers(path):
    for leftover in storage.glob(_escape(path) + "_*") + storage.glob(_escape(path) + ".index") + \
            storage.glob(_escape(path) + ".data-*"):
        storage.remove(leftover)


def prepare_cache_file(cache_dir, name, fields):
    """Returns the tf.data cache file name in `cache_dir` for data described by `fields`.

    A complete cache of the same data is returned to be read. Otherwise this
    process takes the cache's lock (kept until it exits), removes anything an
    interrupted writer left and returns the name for tf.data to write, beside a
    `<name>.json` that says what it holds. Raises InputDataError when `cache_dir`
    cannot be used or another live process is writing the same cache.
    """
    if storage.exists(cache_dir) and not storage.isdir(cache_dir):
        raise InputDataError(f"the cache dir {cache_dir} is a file; pass --cache with a folder")
    try:
        storage.makedirs(cache_dir)
    except OSError as e:
        raise InputDataError(f"cannot create the cache dir {cache_dir} ({e.strerror}); pass another --cache") \
            from None
    path = storage.join(cache_dir, f"{name}-{cache_key(fields)}")
    if path in _held or is_complete(path):
        return path
    try:
        _held[path] = locks.Lease(path + ".lock").acquire() if storage.is_url(path) else locks.acquire(path + ".lock")
    except locks.LockHeld as e:
        raise InputDataError(f"{e.owner} is writing the cache {path}; wait until it has finished its first "
                             "epoch, or pass another --cache folder") from None
    except OSError as e:
        raise InputDataError(f"cannot write to the cache dir {cache_dir} ({e.strerror}); pass another --cache") \
            from None
    _remove_leftovers(path)
    storage.write_atomically(path + ".json", json.dumps({k: v for k, v in fields.items() if k != "files_fingerprint"},
                                                        indent=2, sort_keys=True))
    return path
