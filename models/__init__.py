"""Keras model builders: each returns a compiled tf.keras model and does nothing else.

What the builders accept is named here, not beside them, so that command lines
can offer it without importing TensorFlow.
"""

LR_SCHEDULES = ("constant", "cosine", "step")
# --optimizer: legacy Keras Adam, or SGD with Nesterov momentum SGD_MOMENTUM (see models.optimizers)
OPTIMIZERS = ("adam", "sgd")
SGD_MOMENTUM = 0.9
# --precision: the Keras policy the model is built in. 'bf16-amp' builds it in float32 and has TensorFlow's
# oneDNN graph rewrite (auto_mixed_precision_onednn_bfloat16) run its eligible ops in bfloat16 on the CPU.
PRECISIONS = {"fp32": "float32", "bf16": "mixed_bfloat16", "fp16": "mixed_float16", "bf16-amp": "float32"}
GRAPH_REWRITE_PRECISIONS = {"bf16-amp": "bf16"}  # precision: the type its rewritten ops compute in


def math_precision(name):
    """Returns the type precision `name` computes in, as peaks are keyed: 'bf16' for 'bf16-amp', else `name`."""
    return GRAPH_REWRITE_PRECISIONS.get(name, name)


VGG16_BASE_LAYERS = 18  # convolutions and poolings of VGG16 without its top (its input layer not counted)


class WeightsUnavailableError(Exception):
    """Pretrained weights are neither cached nor downloadable; the message says what to do."""
# --model of the images job: networks trained from random weights (the first is the default; see
# models.scratch and models.backbones), or a tf.keras.applications backbone
SCRATCH_MODELS = ("small_resnet", "small_cnn", "keras_scratch")
BACKBONES = SCRATCH_MODELS + ("vgg16", "resnet50", "mobilenet_v2", "efficientnet_b0")
