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
# BatchNorm's moving statistics forget at 0.9 a step, not Keras's 0.99: a small dataset trains a few hundred
# steps, and at 0.99 the statistics inference uses still hold 30% of their initial (0, 1) after 120 steps (easy
# generated shapes, 13 epochs of Keras fit: 0.28 test accuracy at 0.99, 0.86 at 0.9; docs/images.md).
BN_MOMENTUM = 0.9


def _bn_relu(x, name):
    """Returns BatchNormalization then ReLU applied to `x`, named `name`_bn and `name`_relu."""
    x = tf.keras.layers.BatchNormalization(momentum=BN_MOMENTUM, name=f"{name}_bn")(x)
    return tf.keras.layers.Activation("relu", name=f"{name}_relu")(x)


def _residual_block(x, filters, name):
    """Returns the output of one block on `x`: two separable 3x3 convolutions (BatchNorm after each),
    a 3x3 max-pool of stride 2, plus the input projected by a 1x1 convolution of stride 2."""
    shortcut = x
    x = tf.keras.layers.Activation("relu", name=f"{name}_relu_in")(x)
    x = tf.keras.layers.SeparableConv2D(filters, 3, padding="same", use_bias=False, name=f"{name}_sep1")(x)
    x = _bn_relu(x, f"{name}_1")
    x = tf.keras.layers.SeparableConv2D(filters, 3, padding="same", use_bias=False, name=f"{name}_sep2")(x)
    x = tf.keras.layers.BatchNormalization(momentum=BN_MOMENTUM, name=f"{name}_2_bn")(x)
    x = tf.keras.layers.MaxPooling2D(3, strides=2, padding="same", name=f"{name}_pool")(x)
    shortcut = tf.keras.layers.Conv2D(filters, 1, strides=2, padding="same", name=f"{name}_project")(shortcut)
    return tf.keras.layers.Add(name=f"{name}_add")([x, shortcut])


def scratch_network(name, images):
    """Returns the base (a tf.keras.Model from uint8 `images` to pooled, dropped-out features) of
    network `name` (a WIDTHS key): pixels scaled to [0, 1], a stride-2 3x3 convolution, one residual
    block per block width (each halves the size), a separable convolution, BatchNorm and ReLU, global
    average pooling and dropout."""
    stem, blocks, last, dropout = WIDTHS[name]
    x = tf.keras.layers.Rescaling(1 / 255, name="scale_to_unit")(images)
    x = tf.keras.layers.Conv2D(stem, 3, strides=2, padding="same", use_bias=False, name="stem")(x)
    x = _bn_relu(x, "stem")
    for i, filters in enumerate(blocks):
        x = _residual_block(x, filters, f"block{i + 1}")
    x = tf.keras.layers.SeparableConv2D(last, 3, padding="same", use_bias=False, name="last")(x)
    x = _bn_relu(x, "last")
    x = tf.keras.layers.GlobalAveragePooling2D(name="global_pool")(x)
    x = StepSeededDropout(dropout, name="dropout")(x)  # a resumed --deterministic run drops as a straight one
    return tf.keras.Model(images, x, name=name)
