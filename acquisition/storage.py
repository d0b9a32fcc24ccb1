"""Files on any file system tf.io.gfile knows: local paths, and URLs (gs://, s3:// with
tensorflow-io, hdfs://, TensorFlow's in-process ram://).

A local path goes through os, as before: its errors keep their errno (pipeline.cli's
advice reads it), a write is renamed into place, and nothing imports TensorFlow. A URL
goes through tf.io.gfile, imported when the first URL is met, and never becomes a local
folder (os.makedirs('gs://b/run') would make ./gs:/b/run).

Atomic writes: a file is written under a temporary name in its folder and renamed. On
a local or POSIX network file system the rename is atomic. gfile's rename on GCS and
S3 is a server-side copy and a delete; an object there becomes visible only once its
upload is complete, so a reader still never sees a partial file, but two writers of the
same name race (the last one wins, whole). On ram:// a file's rename works, a folder's
does not (the folder comes out empty: TF 2.15), so no folder is ever renamed here.
"""
import errno
import hashlib
import io
import os
import re
import posixpath
import shutil
import stat
import tempfile
import uuid

from acquisition import faults


def is_url(path):
    """Returns whether `path` names a file system by its scheme (gs://, s3://, ram://...)."""
    return "://" in str(path)


def _gfile():
    import tensorflow as tf  # only once a URL is met: the command lines' --help imports no TensorFlow
    return tf.io.gfile


def join(path, *names):
    """Returns `path` joined with `names` ('/'-separated on a URL)."""
    return posixpath.join(path, *names) if is_url(path) else os.path.join(path, *names)


def absolute(path):
    """Returns the absolute form of a local path, or the URL as it is."""
    return path if is_url(path) else os.path.abspath(path)


def same_folder(a, b):
    """Returns whether the paths `a` and `b` name one folder: by their real paths on this machine (links
    resolved, whether or not they exist), as strings without a trailing slash at URLs."""
    if is_url(a) or is_url(b):
        return str(a).rstrip("/") == str(b).rstrip("/")
    return os.path.realpath(a) == os.path.realpath(b)


def bucket_of(url):
    """Returns 'gs://bucket' for 'gs://bucket/some/run' (the scheme and the first name)."""
    scheme, _, rest = str(url).partition("://")
    return f"{scheme}://{rest.split('/', 1)[0]}"


def exists(path):
    """Returns whether `path` exists."""
    return _gfile().exists(path) if is_url(path) else os.path.exists(path)


def isdir(path):
    """Returns whether `path` is a folder."""
    return _gfile().isdir(path) if is_url(path) else os.path.isdir(path)


def isfile(path):
    """Returns whether `path` is a file (exists and is no folder)."""
    if is_url(path):
        return exists(path) and not isdir(path)
    return os.path.isfile(path)


def makedirs(path):
    """Creates the folder `path` and its parents if absent."""
    _gfile().makedirs(path) if is_url(path) else os.makedirs(path, exist_ok=True)


def listdir(path):
    """Returns the names in the folder `path` (no trailing '/' on a URL's folders)."""
    if is_url(path):
        return [name.rstrip("/") for name in _gfile().listdir(path)]
    return os.listdir(path)


def glob(pattern):
    """Returns the paths matching `pattern` (*, ? and [...] in the last names)."""
    if is_url(pattern):
        return _gfile().glob(pattern)
    import glob as glob_lib
    return glob_lib.glob(pattern)


def read_bytes(path):
    """Returns the content of the file `path`. A missing file raises FileNotFoundError on any file system."""
    if not is_url(path):
        with open(path, "rb") as f:
            return f.read()
    gfile = _gfile()
    if not gfile.exists(path):  # ram://'s NotFoundError has no message
        raise FileNotFoundError(2, "No such file or directory", path)
    with gfile.GFile(path, "rb") as f:
        return f.read()


def read_text(path):
    """Returns the UTF-8 text of the file `path` (see read_bytes)."""
    return read_bytes(path).decode("utf-8")


def sha256(path):
    """Returns the SHA-256 (hex) of the content of the file `path` (see read_bytes)."""
    return hashlib.sha256(read_bytes(path)).hexdigest()


def write_atomically(path, data):
    """Writes `data` (bytes, or str as UTF-8) to `path` under a temporary name, renamed into place;
    returns `path`. A local file is readable by all (0644)."""
    data = data.encode("utf-8") if isinstance(data, str) else data
    folder, name = posixpath.split(path) if is_url(path) else os.path.split(path)
    if is_url(path):
        gfile = _gfile()
        tmp = posixpath.join(folder, f".tmp-{name}-{uuid.uuid4().hex[:8]}")
        try:
            with gfile.GFile(tmp, "wb") as f:
                f.write(data)
            gfile.rename(tmp, path, overwrite=True)
        except BaseException:
            if gfile.exists(tmp):
                gfile.remove(tmp)
            raise
        return path
    fd, tmp = tempfile.mkstemp(prefix=f".tmp-{name}-", dir=folder or ".")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        faults.point("write " + name)
        os.replace(tmp, path)
    except BaseException:
        os.remove(tmp)
        raise
    return path


def rename(source, target):
    """Renames the file `source` to `target`, replacing it (files only: see the module's note on ram://)."""
    _gfile().rename(source, target, overwrite=True) if is_url(source) else os.replace(source, target)


def remove(path):
    """Removes the file `path`."""
    _gfile().remove(path) if is_url(path) else os.remove(path)


def remove_tree(path):
    """Removes `path`, a folder with all it holds, or a file; nothing when it is absent."""
    if is_url(path):
        gfile = _gfile()
        if gfile.isdir(path):
            gfile.rmtree(path)
        elif gfile.exists(path):
            gfile.remove(path)
    elif os.path.isdir(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        os.remove(path)


def copy_file(source, target):
    """Copies the file `source` to `target` (replacing it), across file systems."""
    if is_url(source) or is_url(target):
        _gfile().copy(source, target, overwrite=True)
        return
    try:
        shutil.copy2(source, target)
    except OSError as e:
        # shutil's in-kernel copy names the source first whatever failed; these fail the target.
        if e.filename2 is not None and e.errno in _TARGET_ERRORS:
            e.filename, e.filename2 = e.filename2, e.filename
        raise


_TARGET_ERRORS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS}


def copy_tree(source, target, last=None):
    """Copies the folder `source` into `target` file by file, across file systems; the file named
    `last` (relative to `source`), when given, is copied after all the others. Returns `target`."""
    files = []
    walk = _gfile().walk if is_url(source) else os.walk
    for parent, _, names in walk(source):
        relative = os.path.relpath(parent, source) if not is_url(source) else parent[len(source):].strip("/")
        files += [posixpath.join(relative, n) if relative not in ("", ".") else n for n in names]
    for name in sorted(files, key=lambda n: n == last):
        destination = join(target, *name.split("/"))
        makedirs(destination.rsplit("/", 1)[0] if is_url(destination) else os.path.dirname(destination))
        copy_file(join(source, *name.split("/")), destination)
    return target


# Folders that systems leave beside people's files: a macOS zip's resource forks, a Synology share's thumbnails
# (JPEGs: they would be trained as the class's images), Windows' recycle bin and a drive's own records.
SYSTEM_FOLDERS = frozenset({"__macosx", "@eadir", "$recycle.bin", "system volume information"})  # lowercased


def is_data_folder(name):
    """Returns whether the folder called `name` can hold data: not hidden (.git, .thumbnails), and not one of
    SYSTEM_FOLDERS."""
    name = name.rstrip("/")
    return not name.startswith(".") and name.lower() not in SYSTEM_FOLDERS


def walk(path, left_out=()):
    """Yields (folder, its subfolder names, its file names), both sorted, below `path`, top down: only the
    folders that can hold data (see is_data_folder), and not the folders at the local paths `left_out`. A local
    walk goes into linked folders too, each real folder once (a link to `path` or above it ends, a folder linked
    twice is walked once).
    A folder that cannot be read raises its OSError (os.walk would leave it out, and its images with it,
    without a word)."""
    if is_url(path):
        for parent, dirs, names in _gfile().walk(path):
            dirs[:] = sorted(d for d in dirs if is_data_folder(d))
            yield parent.rstrip("/"), dirs, sorted(names)
        return
    root = os.path.realpath(path)
    seen = {root} | {os.path.realpath(p) for p in left_out}
    for parent, dirs, names in os.walk(path, followlinks=True, onerror=_raise):
        dirs[:] = _unseen(parent, dirs, seen, root)
        yield parent, dirs, sorted(names)


def _unseen(parent, dirs, seen, root):
    """Returns the subfolders of `parent` to walk, in name order: data folders, and not a folder already walked or
    queued (`seen`, their real paths, which this adds to), nor `root` (the walk's real path) or a folder above it,
    as a link up the tree would be: a class folder's link to the data dir would walk the other classes' images."""
    kept = []
    for name in sorted(dirs):
        real = os.path.realpath(os.path.join(parent, name))
        above = root == real or root.startswith(real.rstrip(os.sep) + os.sep)
        if is_data_folder(name) and real not in seen and not above:
            seen.add(real)
            kept.append(name)
    return kept


def _raise(error):
    raise error


def open_binary(path):
    """Returns the file `path` opened for reading bytes (on a URL its content, read at once, in a
    BytesIO). Failures raise OSError on any file system, and so does a local path that is not a regular file: a
    named pipe's open would wait for a writer for ever."""
    if not is_url(path):
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # (which a regular file ignores, and a pipe does not wait in)
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            os.close(fd)
            if stat.S_ISDIR(mode):
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
            raise OSError(errno.EINVAL, "it is a pipe, a device or a socket, not a file", path)
        return os.fdopen(fd, "rb")
    try:
        return io.BytesIO(read_bytes(path))
    except OSError:
        raise
    except Exception as e:  # noqa: BLE001 - tf.errors.OpError: its message, as an OSError's
        raise OSError(5, (getattr(e, "message", "") or type(e).__name__).strip().splitlines()[0], path) from None


def size(path):
    """Returns the size in bytes of the file `path`."""
    return _gfile().stat(path).length if is_url(path) else os.path.getsize(path)


def size_and_mtime(path, opened):
    """Returns (size in bytes, modification time in ns) of the file `path`, `opened` by open_binary."""
    if not is_url(path):
        status = os.fstat(opened.fileno())
        return status.st_size, status.st_mtime_ns
    return len(opened.getbuffer()), int(_gfile().stat(path).mtime_nsec)


_CAUSES = {  # words in a TensorFlow file-system error -> what they mean to a user
    "Could not resolve host": "no network, or no DNS",
    "Couldn't connect": "no network to it",
    "Timeout was reached": "the network timed out",
    "403": "no permission: check the credentials (GOOGLE_APPLICATION_CREDENTIALS) and the bucket's access",
    "401": "not signed in: set GOOGLE_APPLICATION_CREDENTIALS or run gcloud auth application-default login",
    "bucket does not exist": "no such bucket: check its name",
    "Unimplemented": "TensorFlow has no file system for that scheme (s3:// needs `import tensorflow_io`)",
    "not implemented": "TensorFlow has no file system for that scheme (s3:// needs `import tensorflow_io`)",
}


def op_error_line(error):
    """Returns the line of a TensorFlow OpError that says what went wrong: in graph mode its message
    opens with 'Graph execution error:' and where the failing node was defined, and that is not it."""
    for line in error.message.splitlines():
        if line.strip() and not line[0].isspace() and not line.startswith(_OP_ERROR_FRAME):
            return _EAGER_WRAPPING.sub("", line).strip() or type(error).__name__
    return type(error).__name__


# What an eager op's error wraps its cause in: '{{function_node __wrapped__DecodeImage_device_/job:...}} ' before
# it and ' [Op:DecodeImage] name: ' after it.
_EAGER_WRAPPING = re.compile(r"^\{\{function_node [^}]*\}\}\s*|\s*\[Op:\w+\](\s*name:.*)?$")
_OP_ERROR_FRAME = ("Graph execution error:", "Detected at node", "Detected in the process", "Node: ", "[[",
                   "<stack traces unavailable>")


def url_failure(url, message):
    """Returns one line saying why the file system of `url` failed, from TensorFlow's error `message`:
    the bucket, the cause (its 'error details', or first line) and, when known, what it means."""
    lines = [line.strip() for line in str(message).splitlines() if line.strip()]
    cause = lines[0] if lines else "no reason given"
    for line in lines:
        if "error details:" in line:
            cause = line.split("error details:", 1)[1].strip()
            break
    meaning = next((m for words, m in _CAUSES.items() if words in str(message)), None)
    return f"{bucket_of(url)} cannot be reached or written ({cause}{f': {meaning}' if meaning else ''})"
