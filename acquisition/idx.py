"""Reading and writing the IDX format of the MNIST family of datasets.

An IDX file is a big-endian header (two zero bytes, a type code, the number of
dimensions, then one uint32 per dimension) followed by the raw array. Only
unsigned bytes (type code 0x08) are used by (Fashion-)MNIST and supported here.
"""
import gzip
import os
import struct
import zlib

import numpy as np

from acquisition import storage
from acquisition.errors import InputDataError

IMAGES_MAGIC = 2051  # uint8, 3 dimensions: count, rows, columns
LABELS_MAGIC = 2049  # uint8, 1 dimension: count
_UBYTE = 0x08


def _open(path, mode):
    return gzip.open(path, mode) if str(path).endswith(".gz") else open(path, mode)


def read_idx(path, expected_magic):
    """Returns the uint8 array stored in the IDX file at `path` (`.gz` or raw).

    Raises InputDataError when the file is missing, is not IDX, has another
    magic number than `expected_magic`, or is shorter or longer than its header says.
    """
    if not os.path.isfile(path):
        raise InputDataError(f"IDX file not found: {path}")
    try:
        with _open(path, "rb") as f:
            header = f.read(4)
            if len(header) < 4:
                raise InputDataError(f"{path} is too short to be an IDX file ({len(header)} bytes)")
            magic = struct.unpack(">I", header)[0]
            if magic != expected_magic:
                raise InputDataError(
                    f"{path} has IDX magic number {magic}, expected {expected_magic}: "
                    "it is not the file it is named as, or it is damaged")
            ndim = header[3]
            dims_bytes = f.read(4 * ndim)
            if len(dims_bytes) < 4 * ndim:
                raise InputDataError(f"{path} ends inside its IDX header")
            dims = struct.unpack(f">{ndim}I", dims_bytes)
            expected = int(np.prod(dims))
            data = f.read(expected + 1)
    except (OSError, EOFError, zlib.error) as e:
        raise InputDataError(f"cannot read {path}: {e}") from None
    if len(data) != expected:
        problem = "is truncated" if len(data) < expected else "has trailing bytes"
        raise InputDataError(
            f"{path} {problem}: its header promises {expected} bytes of data, "
            f"found {len(data) if len(data) < expected else 'more'}; delete it and download again")
    return np.frombuffer(data, dtype=np.uint8).reshape(dims)


def write_idx(path, array):
    """Writes a uint8 array as an IDX file (gzip-compressed if `path` ends in .gz) whole (see
    storage.write_atomically: a stop or a full disk leaves no file cut short); returns `path`."""
    array = np.asarray(array)
    if array.dtype != np.uint8:
        raise ValueError(f"IDX writing supports uint8 only, got {array.dtype}")
    header = struct.pack(">BBBB", 0, 0, _UBYTE, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    data = header + array.tobytes()
    # Level 1: the 47 MB training images take 1 s instead of 17, for a slightly larger file.
    return storage.write_atomically(path, gzip.compress(data, compresslevel=1) if str(path).endswith(".gz") else data)
