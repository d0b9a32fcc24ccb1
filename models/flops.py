"""The model FLOPs of a Keras model, read from its layers' shapes: what MFU is counted in.

Only the layers that do a model's multiply-adds count: Conv2D, DepthwiseConv2D
(and SeparableConv2D, one of each) and Dense, at 2 FLOPs per multiply-add. Pooling,
activations, biases, normalisation and the optimizer are left out, as in the
PaLM paper's model FLOPs, so that the count is the model's and not the
implementation's. Training counts 3 x forward (the backward pass computes the
gradients of both the inputs and the weights).
"""
import math

import tensorflow as tf

TRAINING_FACTOR = 3


def _size(shape):
    return math.prod(int(d) for d in shape)


def _multiply_adds(layer):
    """Returns the multiply-adds of one image through `layer` (0 for layers that do none)."""
    layers = tf.keras.layers
    if isinstance(layer, layers.SeparableConv2D):
        # A depthwise pass to (input channels x depth multiplier), then a 1x1 convolution.
        middle = int(layer.input_shape[-1]) * layer.depth_multiplier
        spatial = _size(layer.output_shape[1:-1])
        return spatial * middle * (_size(layer.kernel_size) + int(layer.output_shape[-1]))
    if isinstance(layer, layers.DepthwiseConv2D):  # each output value: one input channel's kernel window
        return _size(layer.output_shape[1:]) * _size(layer.kernel_size)
    if isinstance(layer, layers.Conv2D) and not isinstance(layer, layers.Conv2DTranspose):
        input_channels = int(layer.input_shape[-1]) // layer.groups
        return _size(layer.output_shape[1:]) * _size(layer.kernel_size) * input_channels
    if isinstance(layer, layers.Dense):  # applied to the last axis of every position of its input
        return _size(layer.output_shape[1:]) * int(layer.input_shape[-1])
    return 0


def _layers(model):
    for layer in model.layers:
        if isinstance(layer, tf.keras.Model):
            yield from _layers(layer)
        else:
            yield layer


def forward_flops_per_image(model):
    """Returns the FLOPs of one image's forward pass through `model` (2 x its multiply-adds)."""
    return 2 * sum(_multiply_adds(layer) for layer in _layers(model))


def model_flops_per_image(model):
    """Returns {'forward': ..., 'training': ...}: FLOPs per image of a forward pass and of a
    training step (3 x forward)."""
    forward = forward_flops_per_image(model)
    return {"forward": forward, "training": TRAINING_FACTOR * forward}
