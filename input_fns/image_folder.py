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
import os
from typing import List, Tuple

import tensorflow as tf

from input_fns.errors import InputDataError
from input_fns.records import shard_files_for_pipeline

AUTOTUNE = tf.data.AUTOTUNE
BAD_IMAGE_POLICIES = ("fail", "skip")
_DECODE_RATIOS = (1, 2, 4, 8)  # the scales libjpeg can decode at


@dataclasses.dataclass
class FolderScan:
    """The files a pattern matched, sorted: their labels and those that are not whole JPEGs."""
    files: List[str]
    labels: List[int]
    bad_files: List[str]
    class_names: Tuple[str, ...]

    def class_counts(self):
        """Returns {class name: number of good files}."""
        bad = set(self.bad_files)
        counts = collections.Counter(l for f, l in zip(self.files, self.labels) if f not in bad)
        return {name: counts[i] for i, name in enumerate(self.class_names)}

    @property
    def num_good(self):
        """Returns the number of files that are whole JPEGs."""
        return len(self.files) - len(self.bad_files)

    def good(self):
        """Returns (files, labels) without the bad files, in sorted (evaluation) order."""
        bad = set(self.bad_files)
        kept = [(f, l) for f, l in zip(self.files, self.labels) if f not in bad]
        return [f for f, _ in kept], [l for _, l in kept]


def check_bad_files(scan, on_bad_image):
    """Raises InputDataError naming the first file of `scan` that is not a whole JPEG when
    `on_bad_image` is 'fail'; with 'skip' such files are left out, and nothing is raised."""
    if on_bad_image not in BAD_IMAGE_POLICIES:
        raise ValueError(f"on_bad_image must be one of {BAD_IMAGE_POLICIES}, got {on_bad_image!r}")
    if scan.bad_files and on_bad_image == "fail":
        raise InputDataError(
            f"{scan.bad_files[0]} is not a whole JPEG (and {len(scan.bad_files) - 1} more such files); "
            "remove it, or pass --on-bad-image=skip to leave such files out")


def looks_like_jpeg(path):
    """Returns True if the file starts with a JPEG start-of-image marker and ends with an
    end-of-image marker (in its last KiB): a cheap check that catches other formats
    named .jpeg, empty and truncated files without decoding."""
    try:
        with open(path, "rb") as f:
            head = f.read(3)
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 1024))
            tail = f.read()
    except OSError:
        return False
    return head == b"\xff\xd8\xff" and b"\xff\xd9" in tail


def scan_folder(file_pattern, class_names):
    """Returns the FolderScan of `file_pattern`.

    Raises InputDataError when nothing matches, when an image sits in a folder
    that is not one of `class_names`, or when a class has no image.
    """
    files = sorted(tf.io.gfile.glob(file_pattern))
    if not files:
        raise InputDataError(f"no files match the pattern {file_pattern}")
    index = {name: i for i, name in enumerate(class_names)}
    folders = [os.path.basename(os.path.dirname(f)) for f in files]
    unknown = sorted(set(folders) - set(index))
    if unknown:
        example = next(f for f, d in zip(files, folders) if d == unknown[0])
        raise InputDataError(
            f"images in unknown class folder(s) {', '.join(unknown)} (e.g. {example}); "
            f"the classes are {', '.join(class_names)}")
    scan = FolderScan(files, [index[d] for d in folders],
                      [f for f in files if not looks_like_jpeg(f)], tuple(class_names))
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


def decode_and_resize(contents, image_size, channels=1, fast=False):
    """Returns the JPEG `contents` as a uint8 [height, width, channels] image of `image_size`.

    With `fast`, libjpeg decodes at 1/2, 1/4 or 1/8 scale when the result is still
    at least the target size: much less work for large images, and closer to an
    antialiased resize than a full decode followed by a bilinear resize.
    """
    if fast:
        branches = [lambda r=r: tf.io.decode_jpeg(contents, channels=channels, ratio=r)
                    for r in _DECODE_RATIOS]
        image = tf.switch_case(decode_ratio(contents, image_size), branches)
    else:
        image = tf.io.decode_jpeg(contents, channels=channels)
    image = tf.image.resize(image, image_size)
    return tf.saturate_cast(tf.round(image), tf.uint8)


def make_input_fn(file_pattern, class_names, image_size, batch_size, training, scan=None,
                  on_bad_image="fail", channels=1, fast_decode=False,
                  cache=None, shuffle_buffer=2048, feature_key="image", seed=None):
    """Returns an Estimator input_fn(input_context=None) over the images matching `file_pattern`.

    Batches are ({feature_key: uint8 [batch, h, w, channels]}, one-hot float32 labels).
    Files that are not whole JPEGs fail with an error naming the first of them
    (on_bad_image='fail') or are left out ('skip'). `cache` keeps decoded, resized
    images for later epochs: '' in memory, a path on disk, None not at all.
    Training input is shuffled, repeated and batched with the remainder dropped;
    evaluation input yields each good file once, in sorted order.
    """
    scan = scan or scan_folder(file_pattern, class_names)
    check_bad_files(scan, on_bad_image)
    num_classes = len(class_names)

    def input_fn(input_context=None):
        table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(tf.constant(class_names), tf.range(num_classes)), -1)

        def load(path):
            image = decode_and_resize(tf.io.read_file(path), image_size, channels, fast_decode)
            return image, table.lookup(tf.strings.split(path, os.sep)[-2])

        def finish(images, labels):  # on whole batches: fewer, larger ops
            return {feature_key: images}, tf.one_hot(labels, num_classes)

        shuffle_files = training and cache is None  # with a cache, images are shuffled after it
        files = tf.data.Dataset.list_files(file_pattern, shuffle=shuffle_files, seed=seed)
        if scan.bad_files:
            skipped = tf.constant(scan.bad_files)
            files = files.filter(lambda f: tf.reduce_all(tf.not_equal(f, skipped)))
        files = shard_files_for_pipeline(files, input_context)
        if shuffle_files:
            files = files.repeat()
        images = files.map(load, num_parallel_calls=AUTOTUNE, deterministic=not training)
        if cache is not None:
            images = images.cache(cache)
            if training:
                images = images.shuffle(shuffle_buffer, seed=seed).repeat()
        batches = images.batch(batch_size, drop_remainder=training).map(finish, num_parallel_calls=AUTOTUNE)
        return batches.prefetch(AUTOTUNE)

    return input_fn


def make_serving_input_fn(image_size, channels=1, fast_decode=False, feature_key="image"):
    """Returns a serving_input_receiver_fn that takes a batch of JPEG file contents.

    Exported models then accept raw JPEG bytes under the key 'jpeg_bytes' and
    decode and resize them exactly as in training.
    """
    def serving_input_receiver_fn():
        jpeg_bytes = tf.compat.v1.placeholder(tf.string, [None], name="jpeg_bytes")
        images = tf.map_fn(lambda c: decode_and_resize(c, image_size, channels, fast_decode), jpeg_bytes,
                           fn_output_signature=tf.uint8)
        return tf.estimator.export.ServingInputReceiver({feature_key: images}, {"jpeg_bytes": jpeg_bytes})

    return serving_input_receiver_fn
