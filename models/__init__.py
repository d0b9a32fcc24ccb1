"""Keras model builders: each returns a compiled tf.keras model and does nothing else.

What the builders accept is named here, not beside them, so that command lines
can offer it without importing TensorFlow.
"""

LR_SCHEDULES = ("constant", "cosine", "step")
PRECISIONS = {"fp32": "float32", "bf16": "mixed_bfloat16", "fp16": "mixed_float16"}  # --precision: Keras policy
VGG16_BASE_LAYERS = 18  # convolutions and poolings of VGG16 without its top (its input layer not counted)


class WeightsUnavailableError(Exception):
    """Pretrained weights are neither cached nor downloadable; the message says what to do."""
# --model of the images job: networks trained from random weights (the first is the default; see
# models.scratch and models.backbones), or a tf.keras.applications backbone
SCRATCH_MODELS = ("small_resnet", "small_cnn", "keras_scratch")
BACKBONES = SCRATCH_MODELS + ("vgg16", "resnet50", "mobilenet_v2", "efficientnet_b0")
