"""Networks that learn small image datasets from random weights: BatchNorm, residual separable-conv
blocks and global average pooling (the shape of Keras's "image classification from scratch"), at a
small width (small_resnet) and at the example's own (keras_scratch)."""
import tensorflow as tf

from models.dropout import StepSeededDropout

# (stem filters, block filters, last filters, dropout) of each network: small_resnet is the default of
# train_images.py; keras_scratch is Keras's example (keras.io/examples/vision/image_classification_from_scratch)
# as published, kept as the reference the default was measured against (docs/benchmarks.md).
WIDTHS = {
    "small_resnet": (32, (64, 128, 256), 256, 0.25),
    "keras_scratch": (128, (256, 512, 728), 1024, 0.5),
}
# BatchNorm's moving statistics start at (0, 1) and forget them at `momentum` a step; inference reads them. Where
# the features' variance is small (0.005 in small_resnet on easy shapes), even 0.9 after 34 steps (0.9^34 = 0.03)
# left each layer's variance several times too big, and the model scored every image as one class (accuracy 0.33
# on 3 classes, 1.0 at 0.66; docs/images.md). So a run's momentum is chosen from its steps: the initial values
# weigh INITIAL_WEIGHT by half of them, within [MIN_MOMENTUM, Keras's 0.99].
BN_MOMENTUM = 0.9  # where the steps are not known (a network built outside a run)
INITIAL_WEIGHT, MIN_MOMENTUM, MAX_MOMENTUM = 1e-3, 0.5, 0.99


def moving_statistics_momentum(steps):
    """Returns BatchNorm's momentum for a run of `steps` global steps in all (see INITIAL_WEIGHT), or
    BN_MOMENTUM for None."""
    if not steps:
        return BN_MOMENTUM
    return min(MAX_MOMENTUM, max(MIN_MOMENTUM, INITIAL_WEIGHT ** (2 / steps)))


def _bn_relu(x, name, momentum):
    """Returns BatchNormalization (of `momentum`) then ReLU applied to `x`, named `name`_bn and `name`_relu."""
    x = tf.keras.layers.BatchNormalization(momentum=momentum, name=f"{name}_bn")(x)
    return tf.keras.layers.Activation("relu", name=f"{name}_relu")(x)


def _residual_block(x, filters, name, momentum):
    """Returns the output of one block on `x`: two separable 3x3 convolutions (BatchNorm after each),
    a 3x3 max-pool of stride 2, plus the input projected by a 1x1 convolution of stride 2."""
    shortcut = x
    x = tf.keras.layers.Activation("relu", name=f"{name}_relu_in")(x)
    x = tf.keras.layers.SeparableConv2D(filters, 3, padding="same", use_bias=False, name=f"{name}_sep1")(x)
    x = _bn_relu(x, f"{name}_1", momentum)
    x = tf.keras.layers.SeparableConv2D(filters, 3, padding="same", use_bias=False, name=f"{name}_sep2")(x)
    x = tf.keras.layers.BatchNormalization(momentum=momentum, name=f"{name}_2_bn")(x)
    x = tf.keras.layers.MaxPooling2D(3, strides=2, padding="same", name=f"{name}_pool")(x)
    shortcut = tf.keras.layers.Conv2D(filters, 1, strides=2, padding="same", name=f"{name}_project")(shortcut)
    return tf.keras.layers.Add(name=f"{name}_add")([x, shortcut])


def scratch_network(name, images, bn_momentum=BN_MOMENTUM):
    """Returns the base (a tf.keras.Model from uint8 `images` to pooled, dropped-out features) of
    network `name` (a WIDTHS key): pixels scaled to [0, 1], a stride-2 3x3 convolution, one residual
    block per block width (each halves the size), a separable convolution, BatchNorm (of `bn_momentum`,
    see moving_statistics_momentum) and ReLU, global average pooling and dropout."""
    stem, blocks, last, dropout = WIDTHS[name]
    x = tf.keras.layers.Rescaling(1 / 255, name="scale_to_unit")(images)
    x = tf.keras.layers.Conv2D(stem, 3, strides=2, padding="same", use_bias=False, name="stem")(x)
    x = _bn_relu(x, "stem", bn_momentum)
    for i, filters in enumerate(blocks):
        x = _residual_block(x, filters, f"block{i + 1}", bn_momentum)
    x = tf.keras.layers.SeparableConv2D(last, 3, padding="same", use_bias=False, name="last")(x)
    x = _bn_relu(x, "last", bn_momentum)
    x = tf.keras.layers.GlobalAveragePooling2D(name="global_pool")(x)
    x = StepSeededDropout(dropout, name="dropout")(x)  # a resumed --deterministic run drops as a straight one
    return tf.keras.Model(images, x, name=name)
