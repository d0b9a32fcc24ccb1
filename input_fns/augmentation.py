"""Random transforms of a training batch (flip, rotation, zoom, translation, contrast) drawn
statelessly: the draws for global step k on replica r are a pure function of (seed, k, r).

The run loop's model_fn applies `augment` to the features in TRAIN mode only, so
evaluation and the exported model never see a random op, and a resumed run goes on
with the draws of the steps it has not trained rather than replaying step 0's. The
math is float32 under every precision; the batch comes back in its own dtype.
"""
import math

import tensorflow as tf

from input_fns import AUGMENTATIONS

_GEOMETRIC = ("rotate", "zoom", "translate")


def augment(images, transforms, seed, step, replica=0):
    """Returns `images` ([batch, height, width, channels], any real or integer dtype) with
    `transforms` applied, each image drawn on its own: a list of (name, value) from
    AUGMENTATIONS, e.g. [("flip", "horizontal"), ("rotate", 10.0), ("contrast", 0.2)]
    (rotate in degrees, zoom, translate and contrast as fractions).

    The draws are a function of the integers (`seed`, `step`, `replica`) (numbers or
    tensors) alone: `step` is the global step trained, `replica` the replica's index.
    """
    unknown = [name for name, _ in transforms if name not in AUGMENTATIONS]
    if unknown:
        raise ValueError(f"unknown augmentation {unknown[0]!r}; known: {', '.join(AUGMENTATIONS)}")
    dtype = images.dtype
    with tf.name_scope("augmentation"):
        base = tf.stack([tf.cast(seed, tf.int64), tf.cast(step, tf.int64) * 1024 + tf.cast(replica, tf.int64)])
        x = tf.cast(images, tf.float32)
        settings = dict(transforms)
        if "flip" in settings:
            x = _flip(x, settings["flip"], _seed(base, 0))
        if any(name in settings for name in _GEOMETRIC):
            x = _affine(x, settings.get("rotate", 0.0), settings.get("zoom", 0.0), settings.get("translate", 0.0),
                        _seed(base, 1))
        if "contrast" in settings:
            x = _contrast(x, settings["contrast"], _seed(base, 2))
        if dtype.is_integer:
            x = tf.round(tf.clip_by_value(x, dtype.min, dtype.max))
        x = tf.cast(x, dtype)
        x.set_shape(images.shape)  # the projective transform's output size is a tensor: keep the static one
        return tf.identity(x, name="augmented")


def _seed(base, index):
    return tf.random.experimental.stateless_fold_in(base, index)


def _uniform(shape, seed, low, high):
    return tf.random.stateless_uniform(shape, seed, minval=low, maxval=high, dtype=tf.float32)


def _flip(x, direction, seed):
    batch = tf.shape(x)[0]
    draws = _uniform([batch, 2], seed, 0.0, 1.0)
    if direction in ("horizontal", "both"):
        x = tf.where(tf.reshape(draws[:, 0] < 0.5, [-1, 1, 1, 1]), tf.reverse(x, axis=[2]), x)
    if direction in ("vertical", "both"):
        x = tf.where(tf.reshape(draws[:, 1] < 0.5, [-1, 1, 1, 1]), tf.reverse(x, axis=[1]), x)
    return x


def _affine(x, degrees, zoom, translate, seed):
    """Rotates by up to `degrees`, zooms by a factor in [1 - zoom, 1 + zoom] and shifts by up to
    `translate` of the size, about the image's centre, each image its own draw (reflected edges)."""
    shape = tf.shape(x)
    batch, height, width = shape[0], tf.cast(shape[1], tf.float32), tf.cast(shape[2], tf.float32)
    draws = _uniform([batch, 4], seed, -1.0, 1.0)
    angle = draws[:, 0] * degrees * math.pi / 180.0
    scale = 1.0 + draws[:, 1] * zoom  # > 1 zooms in
    shift_x, shift_y = draws[:, 2] * translate * width, draws[:, 3] * translate * height
    cos, sin = tf.cos(angle) / scale, tf.sin(angle) / scale
    # The transform maps each output pixel to the input pixel it is read from:
    # input = A (output - centre) + centre - shift, with A a rotation over the scale.
    cx, cy = (width - 1.0) / 2.0, (height - 1.0) / 2.0
    zeros = tf.zeros_like(cos)
    transforms = tf.stack([cos, -sin, cx - cos * cx + sin * cy - shift_x,
                           sin, cos, cy - sin * cx - cos * cy - shift_y, zeros, zeros], axis=1)
    return tf.raw_ops.ImageProjectiveTransformV3(
        images=x, transforms=transforms, output_shape=shape[1:3], fill_value=0.0, interpolation="BILINEAR",
        fill_mode="REFLECT")


def _contrast(x, amount, seed):
    factor = tf.reshape(_uniform([tf.shape(x)[0]], seed, 1.0 - amount, 1.0 + amount), [-1, 1, 1, 1])
    mean = tf.reduce_mean(x, axis=[1, 2], keepdims=True)
    return (x - mean) * factor + mean
