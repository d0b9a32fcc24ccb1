"""VGG16 transfer learning: an ImageNet VGG16 base with a small classification head."""
import os

import tensorflow as tf

from input_fns import FEATURE_KEY
from models import VGG16_BASE_LAYERS, WeightsUnavailableError
from models.optimizers import Adam

WEIGHTS_FILE = "vgg16_weights_tf_dim_ordering_tf_kernels_notop.h5"  # Keras's cache name
_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
VGG16_BGR_MEANS = (103.939, 116.779, 123.68)  # keras.applications.vgg16's ImageNet means


def _resolve_weights(weights):
    if weights in (None, "none"):
        return None
    if weights != "imagenet":
        if not os.path.isfile(weights):
            raise WeightsUnavailableError(f"weights file not found: {weights}")
        with open(weights, "rb") as f:
            if f.read(8) != _HDF5_SIGNATURE:
                raise WeightsUnavailableError(f"{weights} is not an HDF5 (.h5) weights file; pass --weights with "
                                              f"a no-top VGG16 {WEIGHTS_FILE}, 'imagenet' or 'none'")
        return weights
    cached = os.path.join(os.path.expanduser("~"), ".keras", "models", WEIGHTS_FILE)
    if os.path.isfile(cached):
        return cached
    try:
        return tf.keras.utils.get_file(
            WEIGHTS_FILE, "https://storage.googleapis.com/tensorflow/keras-applications/vgg16/" + WEIGHTS_FILE,
            cache_subdir="models")
    except Exception as e:  # get_file raises a bare Exception on URL and HTTP failures
        raise WeightsUnavailableError(
            f"the ImageNet VGG16 weights are not in {os.path.dirname(cached)} and could not be "
            f"downloaded ({str(e).splitlines()[0]}); pass --weights PATH to an {WEIGHTS_FILE} file, "
            "or --weights none to train from random weights") from None


def vgg16_preprocessing(images):
    """Returns Keras layers applied to uint8 images (1 or 3 channels): Keras's VGG16
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


def build_vgg16_classifier(num_classes, image_size=(224, 224), weights="imagenet", trainable_layers=4,
                           learning_rate=1e-4, input_name=FEATURE_KEY, input_channels=1):
    """Returns the compiled transfer model: VGG16 without its top, Flatten, Dense softmax.

    Its input is uint8 images of `image_size` with `input_channels` (1 for
    grayscale scans), preprocessed inside the model (see vgg16_preprocessing).

    `weights` is 'imagenet' (Keras's cached file, downloaded once), 'none' or a
    path to a no-top VGG16 weights file. All layers of the VGG16 base except its
    last `trainable_layers` are frozen (by default block5's three convolutions
    and its pooling, as in the design). The base's layers are built on the
    preprocessed named input, so the model is flat and the Estimator's feature
    key is `input_name`.
    Compiled with Adam (models.optimizers) and categorical cross-entropy, in the Keras
    precision policy in force.
    """
    if not 0 <= trainable_layers <= VGG16_BASE_LAYERS:
        raise ValueError(f"trainable_layers must be from 0 to {VGG16_BASE_LAYERS}, got {trainable_layers}")
    inputs = tf.keras.Input(shape=tuple(image_size) + (input_channels,), dtype=tf.uint8, name=input_name)
    weights_path = _resolve_weights(weights)
    try:
        base = tf.keras.applications.VGG16(include_top=False, weights=weights_path,
                                           input_tensor=vgg16_preprocessing(inputs))
    except (ValueError, OSError) as e:  # an .h5 of another model, or a damaged one
        raise WeightsUnavailableError(f"cannot load the VGG16 weights in {weights_path} "
                                      f"({str(e).splitlines()[0]}); pass a no-top VGG16 {WEIGHTS_FILE}") from None
    for layer in base.layers[1:]:  # [0] is the input layer
        layer.trainable = False
    for layer in base.layers[len(base.layers) - trainable_layers:] if trainable_layers else []:
        layer.trainable = True
    x = tf.keras.layers.Flatten(name="flatten")(base.output)
    # float32 softmax (and loss) under a mixed-precision policy: 16-bit probabilities round to 0 or 1.
    outputs = tf.keras.layers.Dense(num_classes, activation="softmax", dtype="float32", name="probabilities")(x)
    model = tf.keras.Model(inputs, outputs, name="vgg16_transfer")
    model.compile(optimizer=Adam(learning_rate=learning_rate),
                  loss="categorical_crossentropy", metrics=["accuracy"])
    return model
