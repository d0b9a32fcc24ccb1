"""The model FLOPs of a Keras model, read from its layers' shapes: what MFU is counted in.

Only the layers that do a model's multiply-adds count: Conv2D, DepthwiseConv2D
(and SeparableConv2D, one of each) and Dense, at 2 FLOPs per multiply-add. Pooling,
activations, biases, normalisation and the optimizer are left out, as in the
PaLM paper's model FLOPs, so that the count is the model's and not the
implementation's. A training step counts what its backward pass must compute
besides the forward pass: each trained layer's weight gradients and the input
gradients of every layer after the first trained one, each as many FLOPs as the
layer's forward pass. That is about 3 x forward for a model trained whole (less the
first layer's input gradients, which nothing needs) and far less with frozen layers
(the OCT job's VGG16 trains only its last block: 1.15 x forward), as TF computes it:
a frozen layer below every trained one gets no gradient at all.
"""
import math

import tensorflow as tf

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


def _layers(model, trainable=True):
    """Yields (layer, trained) for the leaf layers of `model` in its order, nested models opened;
    trained: the layer has weights and it and every model holding it are trainable."""
    for layer in model.layers:
        if isinstance(layer, tf.keras.Model):
            yield from _layers(layer, trainable and layer.trainable)
        else:
            yield layer, bool(trainable and layer.trainable and layer.weights)


def forward_flops_per_image(model):
    """Returns the FLOPs of one image's forward pass through `model` (2 x its multiply-adds)."""
    return 2 * sum(_multiply_adds(layer) for layer, _ in _layers(model))


def model_flops_per_image(model):
    """Returns {'forward': ..., 'training': ...}: FLOPs per image of a forward pass and of a
    training step (the forward pass, the trained layers' weight gradients and the input
    gradients of the layers after the first trained one, in the model's order)."""
    forward = training = 0
    after_a_trained_layer = False
    for layer, trained in _layers(model):
        flops = 2 * _multiply_adds(layer)
        forward += flops
        training += flops * (1 + trained + after_a_trained_layer)
        after_a_trained_layer = after_a_trained_layer or trained
    return {"forward": forward, "training": training}
