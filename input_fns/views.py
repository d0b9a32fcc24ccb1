"""The views of test-time augmentation (--tta): an image batch flipped, or cropped at a corner or the
centre and resized back, and an evaluation input_fn whose images are one view of its own.

Every view is deterministic and keeps the batch's shape and dtype, so a model takes it as it takes the
images themselves; integer images are rounded back to their dtype after a crop's bilinear resize (as
input_fns.decode rounds a decoded image). The views' names are input_fns' own (its __init__, without TensorFlow, for --tta's flag).
"""
import tensorflow as tf

from input_fns import CROP_FRACTION, CROP_VIEWS, FEATURE_KEY, FLIP_VIEWS, IDENTITY

_FLIP_AXES = {FLIP_VIEWS["horizontal"]: [2], FLIP_VIEWS["vertical"]: [1], FLIP_VIEWS["both"]: [1, 2]}
# Where each crop starts along each side: 0 at the top (left), 1 at the bottom (right), 0.5 centred.
_CROP_ORIGINS = dict(zip(CROP_VIEWS, ((0, 0), (0, 1), (1, 0), (1, 1), (0.5, 0.5))))
VIEWS = (IDENTITY,) + tuple(_FLIP_AXES) + CROP_VIEWS


def crop_box(view, height, width, fraction=CROP_FRACTION):
    """Returns (top, left, crop height, crop width) of the crop `view` in a `height` x `width` image."""
    crop_height, crop_width = max(1, round(height * fraction)), max(1, round(width * fraction))
    rows, cols = _CROP_ORIGINS[view]
    return int((height - crop_height) * rows), int((width - crop_width) * cols), crop_height, crop_width


def apply_view(images, view, fraction=CROP_FRACTION):
    """Returns the batch `images` ([batch, height, width, channels] with a static height and width, any
    real or integer dtype; a tensor or an array) seen as `view` (one of VIEWS), in its own shape and dtype."""
    if view not in VIEWS:
        raise ValueError(f"unknown view {view!r}; known: {', '.join(VIEWS)}")
    images = tf.convert_to_tensor(images)
    if view == IDENTITY:
        return images
    if view in _FLIP_AXES:
        return tf.reverse(images, axis=_FLIP_AXES[view])
    height, width = images.shape[1], images.shape[2]
    if height is None or width is None:
        raise ValueError(f"the {view} view needs images of a static height and width, got {images.shape}")
    top, left, crop_height, crop_width = crop_box(view, height, width, fraction)
    crop = tf.cast(images[:, top:top + crop_height, left:left + crop_width, :], tf.float32)
    resized = tf.image.resize(crop, [height, width])
    if images.dtype.is_integer:
        return tf.saturate_cast(tf.round(resized), images.dtype)
    return tf.cast(resized, images.dtype)


def view_input_fn(input_fn, view, feature_key=FEATURE_KEY):
    """Returns an Estimator input_fn(input_context=None) giving `input_fn`'s batches, in its order and with
    its other features (file names) and labels, with the images under `feature_key` seen as `view`."""
    if view == IDENTITY:
        return input_fn

    @tf.autograph.experimental.do_not_convert
    def viewed(features, labels):
        return {**features, feature_key: apply_view(features[feature_key], view)}, labels

    def input_fn_of_view(input_context=None):
        return input_fn(input_context=input_context).map(viewed)  # map keeps the order

    return input_fn_of_view
