"""Image classifiers on the backbones people use: a network trained from scratch (small CNN, small
ResNet) or a tf.keras.applications model, each taking uint8 images and running its own preprocessing
inside the model."""
import os

import tensorflow as tf

from input_fns import FEATURE_KEY
from models import SCRATCH_MODELS, WeightsUnavailableError
from models.optimizers import build_optimizer
from models.scratch import BN_MOMENTUM, scratch_network

HEADS = ("pool", "flatten")
VGG16_BGR_MEANS = (103.939, 116.779, 123.68)  # keras.applications.vgg16's ImageNet means
_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
_APPLICATIONS = {
    "vgg16": tf.keras.applications.VGG16,
    "resnet50": tf.keras.applications.ResNet50,
    "mobilenet_v2": tf.keras.applications.MobileNetV2,
    "efficientnet_b0": tf.keras.applications.EfficientNetB0,
}


def vgg16_preprocessing(images):
    """Returns Keras layers applied to uint8 images (1 or 3 channels): Keras's VGG16 ('caffe')
    preprocessing (RGB to BGR, ImageNet means subtracted), grayscale repeated to 3 channels.

    Done in the model, the work runs on the accelerator and the input pipeline
    ships uint8 images: 1.4x less input CPU per image, 12x fewer bytes to copy
    to the GPU than float32 RGB.
    """
    if images.shape[-1] == 1:
        images = tf.keras.layers.Concatenate(name="gray_to_rgb")([images, images, images])
    else:
        images = tf.keras.layers.Lambda(lambda x: tf.reverse(x, axis=[-1]), name="rgb_to_bgr")(images)
    return tf.keras.layers.Normalization(mean=list(VGG16_BGR_MEANS), variance=[1.0, 1.0, 1.0],
                                         name="subtract_imagenet_means")(images)


def _to_rgb(images):
    if images.shape[-1] == 1:  # the applications take 3 channels: gray is repeated
        return tf.keras.layers.Concatenate(name="gray_to_rgb")([images, images, images])
    return images


def _preprocess(name, images):
    """Returns Keras layers applied to uint8 `images`: backbone `name`'s own preprocessing."""
    if name in ("vgg16", "resnet50"):  # Keras's 'caffe' mode: BGR, ImageNet means subtracted
        return vgg16_preprocessing(images)
    images = _to_rgb(images)
    if name == "mobilenet_v2":  # Keras's 'tf' mode: [-1, 1]
        return tf.keras.layers.Rescaling(1 / 127.5, offset=-1.0, name="scale_to_plus_minus_1")(images)
    return tf.keras.layers.Rescaling(1.0, name="to_float")(images)  # EfficientNet rescales inside itself


def _scratch(name, images, weights, bn_momentum):
    """Returns the base of SCRATCH_MODELS' network `name` on uint8 `images`, with the weights of the
    .h5 file `weights` loaded (None or 'none': random), its BatchNorm of `bn_momentum`."""
    if weights == "imagenet":
        raise WeightsUnavailableError(f"{name} has no ImageNet weights; pass --weights none or PATH")
    base = _small_cnn(images) if name == "small_cnn" else scratch_network(name, images, bn_momentum)
    if weights not in (None, "none"):
        base.load_weights(weights)
    return base


def _small_cnn(images):
    """Returns the base of the small CNN (the Fashion-MNIST design, any size and channels: no
    normalisation, Flatten) on uint8 `images`, scaled to [0, 1]."""
    x = tf.keras.layers.Rescaling(1 / 255, name="scale_to_unit")(images)
    for i, filters in enumerate((32, 64)):
        x = tf.keras.layers.Conv2D(filters, 3, activation="relu", name=f"conv{i + 1}")(x)
        x = tf.keras.layers.MaxPooling2D(pool_size=2, strides=2, name=f"pool{i + 1}")(x)
    x = tf.keras.layers.Conv2D(64, 3, activation="relu", name="conv3")(x)
    x = tf.keras.layers.Flatten(name="flatten")(x)
    x = tf.keras.layers.Dense(64, activation="relu", name="dense")(x)
    return tf.keras.Model(images, x, name="small_cnn")


def _application(name, images, weights):
    weights = None if weights in (None, "none") else weights
    try:
        return _APPLICATIONS[name](include_top=False, weights=weights, input_tensor=_preprocess(name, images))
    except Exception as e:  # noqa: BLE001 - Keras's get_file raises a bare Exception when offline
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        if weights == "imagenet" and "URL fetch failure" in first:
            raise WeightsUnavailableError(
                f"the ImageNet {name} weights are not in ~/.keras/models and could not be downloaded ({first}); "
                f"pass --weights PATH to a no-top {name} .h5 file, or --weights none to train from random "
                "weights") from None
        if weights not in (None, "imagenet") and isinstance(e, (ValueError, OSError)):
            raise WeightsUnavailableError(f"cannot load --weights {weights} into {name} ({first}); pass a "
                                          f"no-top {name} .h5 weights file, 'imagenet' or 'none'") from None
        raise


def build_image_classifier(backbone, num_classes, image_size, channels, weights="none", trainable_layers=None,
                           learning_rate=1e-3, input_name=FEATURE_KEY, class_weights=None, head="pool",
                           bn_momentum=BN_MOMENTUM, optimizer="adam", weight_decay=0.0):
    """Returns the compiled classifier: `backbone` (a SCRATCH_MODELS network or a BACKBONES application) without
    its top, a `head` for the applications ('pool': global average pooling; 'flatten': the design's
    Flatten, as the OCT job's VGG16 has it), and a float32 softmax over `num_classes`.

    Its input is uint8 [image_size, channels] images (1 channel is repeated for
    the 3-channel applications), preprocessed inside the model as the backbone
    was trained. `weights`: 'imagenet' (applications), 'none' or the path of a
    no-top .h5 weights file. `trainable_layers`: the backbone's last N layers
    left trainable, the rest frozen (None: all). `class_weights` (one per class)
    multiply each example's cross-entropy by its true class's weight (a soft label's: each class's term
    by its weight). `bn_momentum`: the BatchNorm momentum of a SCRATCH_MODELS network (see
    models.scratch.moving_statistics_momentum). It is compiled with `optimizer` and its decoupled
    `weight_decay` (see models.optimizers.build_optimizer).
    Raises WeightsUnavailableError for weights that cannot be had, ValueError
    for a trainable_layers beyond the backbone's layers.
    """
    if weights not in (None, "none", "imagenet"):
        if not os.path.isfile(weights):
            raise WeightsUnavailableError(f"weights file not found: {weights}; pass --weights with a no-top "
                                          f"{backbone} .h5 file, 'imagenet' or 'none'")
        with open(weights, "rb") as f:
            if f.read(8) != _HDF5_SIGNATURE:
                raise WeightsUnavailableError(f"{weights} is not an HDF5 (.h5) weights file; pass --weights with a "
                                              f"no-top {backbone} .h5 file, 'imagenet' or 'none'")
    inputs = tf.keras.Input(shape=tuple(image_size) + (channels,), dtype=tf.uint8, name=input_name)
    if backbone in SCRATCH_MODELS:  # each ends in its own features (Flatten, or pooling and dropout)
        base = _scratch(backbone, inputs, weights, bn_momentum)
        features = base.output
    else:
        base = _application(backbone, inputs, weights)
        features = tf.keras.layers.Flatten(name="flatten")(base.output) if head == "flatten" else \
            tf.keras.layers.GlobalAveragePooling2D(name="avg_pool_head")(base.output)
    _freeze(base, trainable_layers)
    # float32 softmax (and loss) under a mixed-precision policy: 16-bit probabilities round to 0 or 1.
    outputs = tf.keras.layers.Dense(num_classes, activation="softmax", dtype="float32", name="probabilities")(features)
    model = tf.keras.Model(inputs, outputs, name=f"{backbone}_classifier")
    model.compile(optimizer=build_optimizer(optimizer, learning_rate, weight_decay), loss=_loss(class_weights),
                  metrics=["accuracy"])
    return model


def backbone_layers(base):
    """Returns the layers --trainable-layers counts from the end: every layer of the backbone after
    its input, the preprocessing layers included (they come first and have no weights)."""
    return [layer for layer in base.layers if not isinstance(layer, tf.keras.layers.InputLayer)]


def _freeze(base, trainable_layers):
    layers = backbone_layers(base)
    if trainable_layers is None:
        return
    if not 0 <= trainable_layers <= len(layers):
        raise ValueError(f"--trainable-layers {trainable_layers} is more than {base.name}'s {len(layers)} layers; "
                         f"pass 0 to {len(layers)}")
    for i, layer in enumerate(layers):
        layer.trainable = i >= len(layers) - trainable_layers


def _loss(class_weights):
    if class_weights is None:
        return "categorical_crossentropy"
    weights = [float(w) for w in class_weights]

    def weighted_categorical_crossentropy(y_true, y_pred):
        # -sum_c w_c y_c log p_c: a one-hot label's cross-entropy times its class's weight, and linear in the
        # label, so that a mixed or smoothed label's loss is the same mix of the one-hot losses (input_fns.mixing).
        # The constant is made here, in the graph the Estimator builds, not at model build time.
        return tf.keras.losses.categorical_crossentropy(tf.cast(y_true, tf.float32) * tf.constant(weights), y_pred)

    return weighted_categorical_crossentropy
