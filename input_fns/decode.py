"""Decoding image files as every input and export of the project does: JPEG, PNG, BMP or GIF to
uint8 at the training size, with libjpeg's reduced decoding as an option, and the serving input
that decodes an exported model's file bytes the same way (and, for a model trained on raw pixels,
takes those pixels too)."""
import json

import numpy as np
import tensorflow as tf

from acquisition import storage
from input_fns import FEATURE_KEY

_DECODE_RATIOS = (1, 2, 4, 8)  # the scales libjpeg can decode at
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# The signature of an export (besides serving_default) that takes decoded uint8 pixels: see
# make_serving_input_fn's pixels_key. The Estimator names an alternative receiver's '<receiver>:<output>'.
PIXELS_RECEIVER = "pixels"
PIXELS_SIGNATURE = PIXELS_RECEIVER + ":serving_default"
# In an export's assets.extra (and beside its .tflite files): how serving_default decodes image files.
DECODE_FILE = "decode.txt"
FORBIDDEN_VIEWS_FILE = "forbidden_views.json"  # beside it: the --tta views the job refuses, and why


def scale_to_unit(images):
    """Returns uint8 `images` as float32 in [0, 1] (x / 255): what the Fashion-MNIST input and its export
    give the model."""
    return tf.cast(images, tf.float32) / 255.0


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

    With `fast`, libjpeg decodes a JPEG at 1/2, 1/4 or 1/8 scale when the result is still
    at least the target size: much less work for large images, and closer to an
    antialiased resize than a full decode followed by a bilinear resize. Other formats
    (a PNG sent to an export of such a job, say) are decoded in full.
    """
    if fast:
        def reduced():
            branches = [lambda r=r: tf.io.decode_jpeg(contents, channels=channels, ratio=r)
                        for r in _DECODE_RATIOS]
            return tf.ensure_shape(tf.switch_case(decode_ratio(contents, image_size), branches),
                                   [None, None, channels])
        image = tf.cond(tf.io.is_jpeg(contents), reduced, lambda: decode_image(contents, channels))
    else:
        image = decode_image(contents, channels)
    image = tf.image.resize(image, image_size)
    return tf.saturate_cast(tf.round(image), tf.uint8)


def decode_to_pixels(contents, pixels_shape, fast=False):
    """Returns the image files' `contents` (a list of bytes) as one uint8 array [n, *pixels_shape],
    each decoded and resized as the export's serving_default decodes it (decode_and_resize, `fast` as
    the export's DECODE_FILE says): what a client that feeds pixels (a .tflite model, test-time views)
    gives the model."""
    height, width, channels = pixels_shape
    return np.stack([decode_and_resize(tf.constant(c), (height, width), channels, fast).numpy() for c in contents])


def forbidden_views(folder):
    """Returns {view name: why} of the FORBIDDEN_VIEWS_FILE in `folder` (an export's assets.extra, a .tflite
    file's folder): the --tta views the job that trained the model refuses; {} when there is none."""
    path = storage.join(folder, FORBIDDEN_VIEWS_FILE)
    return json.loads(storage.read_text(path)) if storage.isfile(path) else {}


def decodes_reduced(folder):
    """Returns whether the DECODE_FILE in `folder` (an export's assets.extra, a .tflite file's folder) says
    libjpeg's reduced decoding ('reduced'; 'full', or no such file: full decoding)."""
    path = storage.join(folder, DECODE_FILE)
    return storage.isfile(path) and storage.read_text(path).strip() == "reduced"


class ServingInputFn:
    """A serving_input_receiver_fn (call it) that also says how it decodes files: `decode`, 'reduced' or
    'full', which an export writes to its DECODE_FILE for the clients that decode files themselves; and
    `forbidden_views` ({view name: why}), the --tta views its job refuses, which an export writes to its
    FORBIDDEN_VIEWS_FILE when there are any."""

    def __init__(self, receiver_fn, fast_decode, forbidden_views=None):
        self._receiver_fn, self.decode = receiver_fn, "reduced" if fast_decode else "full"
        self.forbidden_views = dict(forbidden_views or {})

    def __call__(self):
        return self._receiver_fn()


def make_serving_input_fn(image_size, channels=1, fast_decode=False, feature_key=FEATURE_KEY, bytes_key="jpeg_bytes",
                          scale=False, pixels_key=None, forbidden_views=None):
    """Returns a serving_input_receiver_fn that takes a batch of image file contents.

    Exported models then accept raw file bytes under `bytes_key` and decode
    (see decode_and_resize) and resize them exactly as in training. With `scale`
    the model gets them as float32 in [0, 1] (scale_to_unit), for a model trained
    on scaled records. With `pixels_key`, the export has a second signature,
    PIXELS_SIGNATURE, taking uint8 pixels [n, height, width, channels] under that
    key (Fashion-MNIST's IDX bytes, 784 an image): fed where the files' decoding
    ends, they go through the same scaling. `forbidden_views` ({view name: why}) go with it to the export
    (see ServingInputFn).
    """
    shape = [None, *image_size, channels]

    @tf.autograph.experimental.do_not_convert
    def decode_file(contents):
        return decode_and_resize(contents, image_size, channels, fast_decode)

    def serving_input_receiver_fn():
        contents = tf.compat.v1.placeholder(tf.string, [None], name=bytes_key)
        images = tf.map_fn(decode_file, contents, fn_output_signature=tf.uint8)
        alternatives = None
        if pixels_key:  # a placeholder the files' images flow through, unless pixels are fed to it
            images = tf.compat.v1.placeholder_with_default(tf.ensure_shape(images, shape), shape, name=pixels_key)
            alternatives = {PIXELS_RECEIVER: {pixels_key: images}}
        features = {feature_key: scale_to_unit(images) if scale else images}
        return tf.estimator.export.ServingInputReceiver(features, {bytes_key: contents}, alternatives)

    return ServingInputFn(serving_input_receiver_fn, fast_decode, forbidden_views)
