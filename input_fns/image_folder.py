"""Image-folder datasets (`<split>/<CLASS>/<image>.jpeg`) read by file pattern.

The label of an image is the name of its parent folder, looked up in the given class list. The
pipeline: list_files -> parallel map (read, decode the JPEG, optionally at reduced scale, resize)
-> optional cache -> shuffle/repeat for training -> batch -> one-hot labels -> prefetch. Images
stay uint8 with their own channel count: float conversion and model preprocessing belong to the
model, which runs them on the accelerator.
"""
import dataclasses
import os
from typing import Optional, Sequence, Tuple

import tensorflow as tf

from acquisition.image_checks import FolderScan, check_bad_files, scan_folder
from input_fns import FEATURE_KEY
from input_fns.cache import prepare_cache_file
from input_fns.files import num_pipelines, pipeline_files, pipeline_id

AUTOTUNE = tf.data.AUTOTUNE
_DECODE_RATIOS = (1, 2, 4, 8)  # the scales libjpeg can decode at
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


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


@dataclasses.dataclass(frozen=True)
class ImageFolderConfig:
    """What an image-folder input reads and how it batches it."""
    file_pattern: str  # the images, one folder per class: <root>/<class>/<pattern>
    class_names: Sequence[str]  # the class folders' names, in label order
    image_size: Tuple[int, int]  # (height, width) every image is resized to
    batch_size: int  # per input pipeline (per replica)
    training: bool  # shuffle, repeat and drop the last partial batch
    scan: Optional[FolderScan] = None  # the folder's scan_folder, when made already (else made here)
    on_bad_image: str = "fail"  # 'fail': stop naming the first bad file; 'skip': leave bad files out
    channels: int = 1  # what each image is decoded to
    fast_decode: bool = False  # let libjpeg decode at 1/2-1/8 scale when that still covers image_size
    cache: Optional[str] = None  # None: no cache; '': in memory; a folder: files named by what they hold
    shuffle_buffer: int = 2048  # with a cache: images shuffled anew each epoch after it
    feature_key: str = FEATURE_KEY
    seed: Optional[int] = None
    file_key: Optional[str] = None  # evaluation: also yield each image's path under this feature


def make_input_fn(config):
    """Returns an Estimator input_fn(input_context=None) over the images matching the config's pattern.

    Batches are ({feature_key: uint8 [batch, h, w, channels]}, one-hot float32 labels).
    Bad files (see jpeg_problem) fail naming the first (on_bad_image='fail') or are left out
    ('skip'). Each of several input pipelines reads its own shard of the files (files.pipeline_files).

    Training input is the shard's files shuffled as a whole, decoded, repeated and batched with the
    remainder dropped: classes mix as in the dataset from the first batch. With a `cache` the files
    are shuffled once before it, and the cached images again each epoch in a buffer of
    `shuffle_buffer`. Evaluation input yields each good file once, in sorted order.
    """
    (file_pattern, class_names, image_size, batch_size, training, scan, on_bad_image, channels, fast_decode,
     cache, shuffle_buffer, feature_key, seed, file_key) = (getattr(config, f.name) for f in dataclasses.fields(config))
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


def make_serving_input_fn(image_size, channels=1, fast_decode=False, feature_key=FEATURE_KEY, bytes_key="jpeg_bytes"):
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
