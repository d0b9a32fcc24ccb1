"""What an image file holds, read from its headers without decoding it: whether TensorFlow's
decoders can read it (JPEG, PNG, BMP or GIF, told apart by their contents, not their names) and
whether it is grayscale.

The checks read the first and last bytes of each file, so a folder of 100,000
images is checked in seconds, and a file the pipeline would fail on mid-epoch
is named before training starts.
"""
import dataclasses
import collections
import os
import struct
from typing import Optional

from acquisition import storage
from acquisition.image_checks import jpeg_frame_header, jpeg_header_problem

IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".jpe", ".png", ".bmp", ".gif"})  # compared lowercased
# Pictures in formats TensorFlow 2.15 does not decode: left out, and counted so that a run can say so.
UNREAD_IMAGE_EXTENSIONS = frozenset({".webp", ".tif", ".tiff", ".heic", ".heif", ".avif", ".jxl", ".jp2", ".psd",
                                     ".dng", ".cr2", ".nef", ".arw"})
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_PNG_GRAY_TYPES = (0, 4)  # gray, gray with alpha (2: RGB, 3: palette, 6: RGBA)
_PNG_COLOR_TYPES = (0, 2, 3, 4, 6)
_BMP_COMPRESSIONS = (0, 3)  # uncompressed, bit fields: what TensorFlow's BMP decoder reads
NOT_AN_IMAGE = "is not a JPEG, PNG, BMP or GIF image"  # the problem of a file of no format TensorFlow decodes


@dataclasses.dataclass
class ImageCheck:
    """What one file's headers say: the problem keeping it from decoding (None if it decodes),
    whether it is grayscale, and its size and modification time (for fingerprints)."""
    problem: Optional[str]
    gray: bool = False
    size: int = 0
    mtime_ns: int = 0


def is_image_name(name):
    """Returns whether a file named `name` is taken for an image: an image extension (any case),
    and not hidden (macOS's ._ files, say)."""
    return not name.startswith(".") and os.path.splitext(name)[1].lower() in IMAGE_EXTENSIONS


def unread_images(names):
    """Returns {'.webp': 4, ...}, sorted by extension: how many of the file `names` are pictures in a format no
    job reads (.webp, .tif, .heic...; hidden files are none)."""
    extensions = (os.path.splitext(n)[1].lower() for n in names if not n.startswith("."))
    return dict(sorted(collections.Counter(e for e in extensions if e in UNREAD_IMAGE_EXTENSIONS).items()))


def describe_unread(counts):
    """Returns unread_images' `counts` in words: '2 .tif, 4 .webp'."""
    return ", ".join(f"{count} {extension}" for extension, count in counts.items())


def check_image(path, channels=None):
    """Returns the ImageCheck of the file at `path`, to be decoded to `channels` (1, 3, or None
    for its own)."""
    try:
        with storage.open_binary(path) as f:
            size, mtime_ns = storage.size_and_mtime(path, f)
            head = f.read(64)
            problem, gray = _check_open_file(f, head, size, channels)
    except OSError as e:
        return ImageCheck(f"cannot be read ({e.strerror})")
    return ImageCheck(problem, gray, size, mtime_ns)


def _tail(f, size, length=1024):
    f.seek(max(0, size - length))
    return f.read()


def _check_open_file(f, head, size, channels):
    if size == 0:
        return "is empty", False
    if head[:3] == b"\xff\xd8\xff":
        f.seek(2)  # just after the start-of-image marker
        header = jpeg_frame_header(f)
        problem = jpeg_header_problem(size, head[:3], header, _tail(f, size), channels or 3)
        return problem, problem is None and header[4] == 1
    if head[:8] == _PNG_SIGNATURE:
        return _png_problem(head, _tail(f, size))
    if head[:2] == b"BM":
        return _bmp_problem(f, head)
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return _gif_problem(head, _tail(f, size))
    return NOT_AN_IMAGE, False


def _png_problem(head, tail):
    if len(head) < 29 or head[12:16] != b"IHDR":
        return "has no PNG header (IHDR)", False
    width, height, depth, color_type = struct.unpack(">IIBB", head[16:26])
    if b"IEND" not in tail:
        return "is truncated (no PNG end chunk)", False
    if width == 0 or height == 0:
        return "has no image size in its PNG header", False
    if color_type not in _PNG_COLOR_TYPES or depth not in (1, 2, 4, 8, 16):
        return f"has an unknown PNG color type {color_type} or bit depth {depth}", False
    return None, color_type in _PNG_GRAY_TYPES


def _bmp_problem(f, head):
    if len(head) < 34:
        return "is truncated (no BMP header)", False
    pixels_at, header_size, width, height, _, bits, compression = struct.unpack("<I I i i H H I", head[10:34])
    if width <= 0 or height == 0:
        return "has no image size in its BMP header", False
    if compression not in _BMP_COMPRESSIONS:
        return f"is a compressed BMP (method {compression}), which TensorFlow cannot decode; save it uncompressed", \
            False
    if bits not in (8, 24, 32):
        return f"is a {bits}-bit BMP; TensorFlow decodes 8-bit (gray), 24- and 32-bit BMPs", False
    if bits == 8:
        # TensorFlow reads an 8-bit BMP's values as gray levels and ignores its palette.
        f.seek(14 + header_size)
        palette = f.read(min(1024, max(0, pixels_at - 14 - header_size)))
        gray_ramp = all(palette[4 * i:4 * i + 3] == bytes((i, i, i)) for i in range(len(palette) // 4))
        if not gray_ramp:
            return "is an 8-bit palette BMP, which TensorFlow decodes as gray levels; save it as 24-bit", False
        return None, True
    return None, False


def _gif_problem(head, tail):
    width, height = struct.unpack("<HH", head[6:10])
    if width == 0 or height == 0:
        return "has no image size in its GIF header", False
    if not tail.rstrip(b"\x00").endswith(b";"):
        return "is truncated (no GIF trailer)", False
    return None, False  # GIFs are palette images: TensorFlow decodes them as colour
