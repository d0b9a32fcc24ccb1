"""Files written whole: a crash or a kill leaves the previous file (or none), never a partial one."""
import json
import os
import shutil
import socket
import tempfile
import urllib.error
import urllib.request

from acquisition import storage
from acquisition.errors import DownloadError


def write_text_atomically(path, text):
    """Writes `text` (UTF-8) to `path`, readable by all (0644); returns `path`.

    The file is written under a temporary name in the same folder and renamed,
    so a crash leaves the previous file intact rather than a truncated one, and
    several processes writing the same file (a cluster's workers) never mix. On a
    URL (gs://, ram://...) through tf.io.gfile: see acquisition.storage for what
    its rename promises there.
    """
    return storage.write_atomically(path, text)


def present(folder, names):
    """Returns those of `names` that stand in the local `folder` (links too, even broken ones): the outputs a
    tool would write over."""
    return [name for name in names if os.path.lexists(os.path.join(folder, name))]


def write_json_atomically(path, value):
    """Writes `value` as indented JSON to `path` with write_text_atomically; returns `path`."""
    return write_text_atomically(path, json.dumps(value, indent=2, sort_keys=True) + "\n")


def download_file(url, path, timeout, what):
    """Downloads `url` to `path` under a temporary name, renamed when complete; returns `path`.

    Raises DownloadError("`what` ... downloading `url` failed (reason)") when the
    network or server fails; nothing is left at `path` then.
    """
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}-", dir=os.path.dirname(path) or ".")
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=timeout) as response:
            shutil.copyfileobj(response, out)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except (urllib.error.URLError, socket.timeout, ConnectionError) as e:
        raise DownloadError(f"{what} and downloading {url} failed ({getattr(e, 'reason', e)})") from None
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return path
