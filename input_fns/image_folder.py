"""Image-folder datasets (`<split>/<CLASS>/<image>.jpeg`) read by file pattern.

The label of an image is the name of its parent folder, looked up in the given
class list. The pipeline: list_files -> parallel map (read, decode the JPEG,
optionally at reduced scale, resize) -> optional cache -> shuffle/repeat for
training -> batch -> one-hot labels -> prefetch. Images stay uint8 with their
own channel count: float conversion and model preprocessing belong to the model,
which runs them on the accelerator.
"""
import collections
import dataclasses
import hashlib
import os
import struct
from typing import Dict, List, Tuple

import tensorflow as tf

from input_fns.cache import prepare_cache_file
from acquisition.errors import InputDataError
from input_fns.files import matching_files, num_pipelines, pipeline_files, pipeline_id

AUTOTUNE = tf.data.AUTOTUNE
BAD_IMAGE_POLICIES = ("fail", "skip")
_DECODE_RATIOS = (1, 2, 4, 8)  # the scales libjpeg can decode at
_SOF_MARKERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}  # start-of-frame: 0xC4, C8, CC are others
_DECODABLE_SOF = frozenset({0xC0, 0xC1, 0xC2, 0xC9, 0xCA})  # sequential and progressive, Huffman or arithmetic
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


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

    def good(self):
        """Returns (files, labels) without the bad files, in sorted (evaluation) order."""
        kept = [(f, l) for f, l in zip(self.files, self.labels) if f not in self.problems]
        return [f for f, _ in kept], [l for _, l in kept]


def check_bad_files(scan, on_bad_image):
    """Raises InputDataError naming the first bad file of `scan` and its problem when
    `on_bad_image` is 'fail'; with 'skip' such files are left out, and nothing is raised."""
    if on_bad_image not in BAD_IMAGE_POLICIES:
        raise ValueError(f"on_bad_image must be one of {BAD_IMAGE_POLICIES}, got {on_bad_image!r}")
    if scan.problems and on_bad_image == "fail":
        first = scan.bad_files[0]
        more = f" (and {len(scan.problems) - 1} more bad files)" if len(scan.problems) > 1 else ""
        raise InputDataError(f"{first} {scan.problems[first]}{more}; remove or convert it, "
                             "or pass --on-bad-image=skip to leave such files out")


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
        with open(path, "rb") as f:
            stat = os.fstat(f.fileno())
            head = f.read(3)
            f.seek(2)  # just after the start-of-image marker
            header = jpeg_frame_header(f) if head == b"\xff\xd8\xff" else None
            f.seek(max(0, stat.st_size - 1024))
            tail = f.read()
    except OSError as e:
        return f"cannot be read ({e.strerror})", 0, 0
    return jpeg_header_problem(stat.st_size, head, header, tail, channels), stat.st_size, stat.st_mtime_ns


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


def decode_ratio(contents, image_size):
    """Returns the largest JPEG decode ratio (1, 2, 4 or 8) that keeps the image at least
    `image_size` (height, width), read from the JPEG header without decoding."""
    shape = tf.image.extract_jpeg_shape(contents)
    fits = tf.minimum(shape[0] // image_size[0], shape[1] // image_size[1])
    return tf.reduce_sum(tf.cast(fits >= tf.constant(_DECODE_RATIOS[1:]), tf.int32))  # branch index


def decode_image(contents, channels):
    """Returns the JPEG, PNG, BMP or GIF (first frame) `contents` as a uint8 [height, width, channels]
    image (`channels` 1 or 3; alpha dropped, 16-bit PNGs scaled to 8 bits).

    JPEG and PNG decode to grayscale themselves; TensorFlow's BMP and GIF decoders
    give colour only, so those are converted with rgb_to_grayscale.
    """
    if channels == 3:
        return tf.ensure_shape(tf.io.decode_image(contents, channels=3, expand_animations=False), [None, None, 3])
    decodes_gray = tf.logical_or(tf.io.is_jpeg(contents), tf.equal(tf.strings.substr(contents, 0, 8), _PNG_SIGNATURE))
    image = tf.cond(decodes_gray,
                    lambda: tf.io.decode_image(contents, channels=1, expand_animations=False),
                    lambda: tf.image.rgb_to_grayscale(tf.io.decode_image(contents, channels=3, expand_animations=False)))
    return tf.ensure_shape(image, [None, None, 1])


def decode_and_resize(contents, image_size, channels=1, fast=False):
    """Returns the image `contents` (see decode_image) as a uint8 [height, width, channels] image of
    `image_size`.

    With `fast`, libjpeg decodes at 1/2, 1/4 or 1/8 scale when the result is still
    at least the target size: much less work for large images, and closer to an
    antialiased resize than a full decode followed by a bilinear resize.
    """
    if fast:
        branches = [lambda r=r: tf.io.decode_jpeg(contents, channels=channels, ratio=r)
                    for r in _DECODE_RATIOS]
        image = tf.switch_case(decode_ratio(contents, image_size), branches)
    else:
        image = decode_image(contents, channels)
    image = tf.image.resize(image, image_size)
    return tf.saturate_cast(tf.round(image), tf.uint8)


def make_input_fn(file_pattern, class_names, image_size, batch_size, training, scan=None,
                  on_bad_image="fail", channels=1, fast_decode=False,
                  cache=None, shuffle_buffer=2048, feature_key="image", seed=None, file_key=None):
    """Returns an Estimator input_fn(input_context=None) over the images matching `file_pattern`.

    Batches are ({feature_key: uint8 [batch, h, w, channels]}, one-hot float32 labels).
    Bad files (see jpeg_problem) fail with an error naming the first of them
    (on_bad_image='fail') or are left out ('skip'). With several input pipelines
    each reads its own shard of the files (see files.pipeline_files).

    Training input is the shard's files shuffled as a whole, decoded, repeated
    and batched with the remainder dropped: classes mix as in the dataset from
    the first batch. `cache` keeps the decoded, resized images of the first
    epoch for later ones: '' in memory, a folder for files keyed by what they
    hold (see cache.prepare_cache_file), None not at all. The files are then
    shuffled once before the cache, and the cached images again each epoch in a
    buffer of `shuffle_buffer`. Evaluation input yields each good file once, in
    sorted order; with `file_key` its features also hold each image's path under
    that key (the evaluation's per-image report names the files).
    """
    scan = scan or scan_folder(file_pattern, class_names, channels)
    check_bad_files(scan, on_bad_image)
    num_classes = len(class_names)

    def input_fn(input_context=None):
        table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(tf.constant(class_names), tf.range(num_classes)), -1)

        with_paths = file_key is not None and not training

        def load(path):
            image = decode_and_resize(tf.io.read_file(path), image_size, channels, fast_decode)
            return (image, path) if with_paths else image, table.lookup(tf.strings.split(path, os.sep)[-2])

        def finish(images, labels):  # on whole batches: fewer, larger ops
            features = {feature_key: images[0], file_key: images[1]} if with_paths else {feature_key: images}
            return features, tf.one_hot(labels, num_classes)

        files = pipeline_files(file_pattern, scan.num_good, input_context, training, seed,
                               reshuffle_each_epoch=cache is None, exclude=scan.bad_files)
        images = files.map(load, num_parallel_calls=AUTOTUNE, deterministic=not training)
        if cache is not None:
            images = images.cache(cache and prepare_cache_file(cache, "images", {
                "pattern": file_pattern, "files_fingerprint": scan.fingerprint, "skipped": scan.bad_files,
                "shard": [pipeline_id(input_context), num_pipelines(input_context)],
                "image_size": list(image_size), "channels": channels,
                "decode": "reduced" if fast_decode else "full", "training": training}))
            if training:
                images = images.shuffle(shuffle_buffer, seed=seed)
        if training:
            images = images.repeat()
        batches = images.batch(batch_size, drop_remainder=training).map(finish, num_parallel_calls=AUTOTUNE)
        return batches.prefetch(AUTOTUNE)

    return input_fn


def make_serving_input_fn(image_size, channels=1, fast_decode=False, feature_key="image", bytes_key="jpeg_bytes"):
    """Returns a serving_input_receiver_fn that takes a batch of image file contents.

    Exported models then accept raw file bytes under `bytes_key` and decode
    (see decode_and_resize) and resize them exactly as in training.
    """
    def serving_input_receiver_fn():
        contents = tf.compat.v1.placeholder(tf.string, [None], name=bytes_key)
        images = tf.map_fn(lambda c: decode_and_resize(c, image_size, channels, fast_decode), contents,
                           fn_output_signature=tf.uint8)
        return tf.estimator.export.ServingInputReceiver({feature_key: images}, {bytes_key: contents})

    return serving_input_receiver_fn
