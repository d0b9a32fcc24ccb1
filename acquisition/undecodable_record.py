"""The image files a run could not decode though their headers read well (see acquisition.undecodable),
remembered in its model dir: the runs after it read them as bad files, so that --on-bad-image skip leaves them
out, and no run decodes every image again to find them."""
import json
import os

from acquisition import storage
from acquisition.files import write_json_atomically


def remember(record_path, found):
    """Adds `found` ({file: TensorFlow's words, or None}) to the record at `record_path` (JSON), each local
    file with its size and modification time, which tell a file replaced since; returns `record_path`."""
    files = _read_record(record_path)
    for f, words in found.items():
        if not storage.is_url(f):
            stat = os.stat(f)
            files[os.path.abspath(f)] = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "words": words}
    return write_json_atomically(record_path, {"files": files})


def remembered(record_path):
    """Returns {file: the problem's words} of the files the record at `record_path` names that are as they were
    when a run failed to decode them, or gone (a file replaced since is read again); {} without a record."""
    found = {}
    for f, was in _read_record(record_path).items():
        try:
            stat = os.stat(f)
        except FileNotFoundError:
            stat = None
        if stat is None or (stat.st_size, stat.st_mtime_ns) == (was.get("size"), was.get("mtime_ns")):
            found[f] = (f"cannot be decoded ({was.get('words') or 'TensorFlow refused it'}), though its header reads "
                        f"well (a run of this model dir met it: {record_path}); replace or remove it")
    return found


def _read_record(record_path):
    try:
        files = json.loads(storage.read_text(record_path)).get("files")
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, AttributeError):  # damaged: the next failure finds the files again
        return {}
    return files if isinstance(files, dict) else {}
