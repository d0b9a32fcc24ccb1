"""Image files checked from their headers before any is decoded: the files of a class-folder
pattern (FolderScan), and what is wrong with each JPEG that TensorFlow could not decode as the
pipeline needs, so that a bad file is named before training, not mid-epoch."""
import collections
import dataclasses
import glob
import hashlib
import logging
import os
import struct
from typing import Dict, List, Tuple

from acquisition import storage
from acquisition.errors import InputDataError

log = logging.getLogger(__name__)

BAD_IMAGE_POLICIES = ("fail", "skip")
_SOF_MARKERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}  # start-of-frame: 0xC4, C8, CC are others
_DECODABLE_SOF = frozenset({0xC0, 0xC1, 0xC2, 0xC9, 0xCA})  # sequential and progressive, Huffman or arithmetic


def matching_files(file_pattern):
    """Returns the sorted files matching `file_pattern`; raises InputDataError if there are none."""
    import tensorflow as tf  # noqa: PLC0415 - the folder checks before training import none (see class_folders)
    try:
        files = sorted(tf.io.gfile.glob(file_pattern))
    except UnicodeDecodeError:  # TensorFlow decodes each name it lists as UTF-8
        garbled = next((f for f in sorted(glob.glob(file_pattern)) if is_not_utf8(f)), None)
        where = shown_path(garbled) if garbled else f"a file matching {file_pattern}"
        raise InputDataError(f"{where} {NOT_UTF8}") from None
    if not files:
        raise InputDataError(f"no files match the pattern {file_pattern}")
    return files


@dataclasses.dataclass
class FolderScan:
    """The files a pattern matched, sorted: their labels, the bad ones and a fingerprint of them all."""
    files: List[str]
    labels: List[int]
    problems: Dict[str, str]  # bad file -> what is wrong with it
    class_names: Tuple[str, ...]
    fingerprint: str = ""  # changes when any file is added, removed, resized or rewritten

    @property
    def bad_files(self):
        """Returns the files that cannot be decoded as the pipeline needs, sorted."""
        return sorted(self.problems)

    def class_counts(self):
        """Returns {class name: number of good files}."""
        counts = collections.Counter(l for f, l in zip(self.files, self.labels) if f not in self.problems)
        return {name: counts[i] for i, name in enumerate(self.class_names)}

    @property
    def num_good(self):
        """Returns the number of files the pipeline reads."""
        return len(self.files) - len(self.problems)

    def with_problems(self, problems):
        """Returns this scan with those of its files that `problems` ({absolute path: problem}) names bad too."""
        named = {f: problems[os.path.abspath(f)] for f in self.files if os.path.abspath(f) in problems}
        return dataclasses.replace(self, problems={**self.problems, **named}) if named else self

    def good(self):
        """Returns (files, labels) without the bad files, in sorted (evaluation) order."""
        kept = [(f, l) for f, l in zip(self.files, self.labels) if f not in self.problems]
        return [f for f, _ in kept], [l for _, l in kept]


def has_line_break(name):
    """Returns whether `name` holds a character that splits lines (a newline, a carriage return, or
    another that str.splitlines splits at): the files that list names one a line cannot hold it."""
    return len(f"a{name}a".splitlines()) > 1


NOT_UTF8 = ("has a name that is not UTF-8 (as unzip leaves an old zip's names), which TensorFlow and the model dir's "
            "lists cannot hold; rename it (convmv -f latin1 -t utf-8 -r --notest DIR renames a whole tree)")


def is_not_utf8(name):
    """Returns whether `name` came from bytes that are not UTF-8 (as unzip leaves an old zip's names): Python
    holds them as lone surrogates, which no text file or JSON written as UTF-8 can hold."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def shown_path(path):
    """Returns `path` as a one-line error shows it: quoted and escaped if it holds a line break or bytes that
    are not UTF-8."""
    return repr(path) if has_line_break(path) or is_not_utf8(path) else path


def check_bad_files(scans, on_bad_image, listed_in="the run's results.json"):
    """Raises InputDataError naming the first bad file of the FolderScans `scans` (the splits of one
    dataset), its problem and how many more there are in them all, when `on_bad_image` is 'fail';
    with 'skip' such files are left out, warned of in one line naming the file `listed_in` that lists
    them (skipped_files), and nothing is raised."""
    if on_bad_image not in BAD_IMAGE_POLICIES:
        raise ValueError(f"on_bad_image must be one of {BAD_IMAGE_POLICIES}, got {on_bad_image!r}")
    problems = {f: problem for scan in scans for f, problem in scan.problems.items()}
    if problems and on_bad_image == "fail":
        first = min(problems)
        more = f" (and {len(problems) - 1} more bad files)" if len(problems) > 1 else ""
        fix = "" if ";" in problems[first] else "; remove or convert it"  # (a problem may name its own fix)
        raise InputDataError(f"{shown_path(first)} {problems[first]}{more}{fix}, or pass --on-bad-image=skip to "
                             "leave such files out")
    if problems:
        first = min(problems)
        log.warning("%d bad image file%s left out (--on-bad-image skip), the first %s %s; %s lists each "
                    "(skipped_files)", len(problems), "" if len(problems) == 1 else "s", shown_path(first),
                    problems[first], listed_in)


def jpeg_frame_header(f):
    """Returns (SOF marker, precision, height, width, components) of the open JPEG `f`
    (positioned after its start-of-image marker), or None if none comes before the scan."""
    while True:
        marker = f.read(2)
        while marker[:1] == b"\xff" and marker[1:] == b"\xff":  # fill bytes
            marker = marker[1:] + f.read(1)
        if len(marker) < 2 or marker[0] != 0xFF or marker[1] in (0xD9, 0xDA):
            return None
        if 0xD0 <= marker[1] <= 0xD8 or marker[1] == 0x01:  # markers without a length
            continue
        length = f.read(2)
        if len(length) < 2:
            return None
        length = struct.unpack(">H", length)[0]
        if marker[1] in _SOF_MARKERS:
            body = f.read(6)
            if len(body) < 6:
                return None
            precision, height, width, components = struct.unpack(">BHHB", body)
            return marker[1], precision, height, width, components
        f.seek(length - 2, os.SEEK_CUR)


def _inspect_file(path, channels):
    """Returns (problem or None, size, mtime_ns) of the image file at `path`."""
    try:
        with storage.open_binary(path) as f:
            size, mtime_ns = storage.size_and_mtime(path, f)
            head = f.read(3)
            f.seek(2)  # just after the start-of-image marker
            header = jpeg_frame_header(f) if head == b"\xff\xd8\xff" else None
            f.seek(max(0, size - 1024))
            tail = f.read()
    except OSError as e:
        return f"cannot be read ({e.strerror})", 0, 0
    return jpeg_header_problem(size, head, header, tail, channels), size, mtime_ns


def jpeg_header_problem(size, head, header, tail, channels):
    """Returns what keeps a JPEG of `size` bytes from decoding to `channels` channels, or None, from
    its first 3 bytes `head`, its jpeg_frame_header and its last bytes `tail`."""
    if size == 0:
        return "is empty"
    if head != b"\xff\xd8\xff":
        return "is not a JPEG file"
    if b"\xff\xd9" not in tail:
        return "is truncated (no JPEG end marker)"
    if header is None:
        return "has no JPEG frame header"
    marker, precision, height, width, components = header
    if marker not in _DECODABLE_SOF:
        return f"is a lossless or hierarchical JPEG (marker 0x{marker:X}), which TensorFlow cannot decode"
    if precision != 8:
        return f"is a {precision}-bit JPEG; TensorFlow decodes 8-bit JPEGs only"
    if height == 0 or width == 0:
        return "has no image size in its JPEG header"
    if components == 4 and channels == 1:
        return "is a CMYK JPEG, which TensorFlow cannot decode to grayscale; convert it to grayscale or RGB"
    if components not in (1, 3, 4):
        return f"has {components} color components; JPEGs have 1, 3 or 4"
    return None


def jpeg_problem(path, channels=1):
    """Returns what keeps the file at `path` from decoding as a `channels`-channel JPEG, or None.

    Reads the start-of-image marker, the frame header and the end marker, not
    the image: other formats named .jpeg, empty, truncated and unreadable files,
    CMYK scans (TensorFlow cannot decode them to grayscale), 12-bit, lossless and
    hierarchical JPEGs all show there.
    """
    return _inspect_file(path, channels)[0]


def scan_folder(file_pattern, class_names, channels=1):
    """Returns the FolderScan of `file_pattern`, checking each file's JPEG headers.

    Raises InputDataError when nothing matches, when an image sits in a folder
    that is not one of `class_names`, or when a class has no good image.
    """
    files = matching_files(file_pattern)
    index = {name: i for i, name in enumerate(class_names)}
    folders = [os.path.basename(os.path.dirname(f)) for f in files]
    unknown = sorted(set(folders) - set(index))
    if unknown:
        example = next(f for f, d in zip(files, folders) if d == unknown[0])
        raise InputDataError(
            f"images in unknown class folder(s) {', '.join(unknown)} (e.g. {example}); "
            f"the classes are {', '.join(class_names)}")
    digest, problems = hashlib.sha256(), {}
    for f in files:
        problem, size, mtime = _inspect_file(f, channels)
        digest.update(f"{f}\0{size}\0{mtime}\n".encode())
        if problem:
            problems[f] = problem
    scan = FolderScan(files, [index[d] for d in folders], problems, tuple(class_names), digest.hexdigest())
    empty = [name for name, n in scan.class_counts().items() if n == 0]
    if empty:
        raise InputDataError(f"no readable images of class {', '.join(empty)} match {file_pattern}")
    return scan
