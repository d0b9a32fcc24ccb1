"""The small CNN of the design write-up for 28x28 grayscale images."""
import tensorflow as tf

from input_fns import FEATURE_KEY
from models.optimizers import build_optimizer


def build_fashion_cnn(learning_rate, input_shape=(28, 28, 1), num_classes=10, input_name=FEATURE_KEY,
                      input_dtype="float32", optimizer="adam", weight_decay=0.0):
    """Returns the compiled CNN: three 3x3 convolutions, two poolings, a 64-unit dense layer.

    It takes images of any `input_shape` (height, width, channels). With `input_dtype`
    'uint8' it takes the image folders' and JPEG exports' uint8 pixels and scales them
    to [0, 1] itself; with 'float32', pixels already scaled (Fashion-MNIST's input).

    It is compiled with `optimizer` and its decoupled `weight_decay` (models.optimizers: legacy Keras ones),
    categorical cross-entropy on one-hot labels and an accuracy metric, in the
    Keras precision policy in force (see models.optimizers.precision).
    The input layer is named so that the Estimator's feature key is stable.
    """
    inputs = tf.keras.Input(shape=input_shape, name=input_name, dtype=input_dtype)
    x = tf.keras.layers.Rescaling(1 / 255, name="scale_pixels")(inputs) if input_dtype == "uint8" else inputs
    x = tf.keras.layers.Conv2D(32, 3, activation="relu")(x)
    x = tf.keras.layers.MaxPooling2D(pool_size=2, strides=2)(x)
    x = tf.keras.layers.Conv2D(64, 3, activation="relu")(x)
    x = tf.keras.layers.MaxPooling2D(pool_size=2, strides=2)(x)
    x = tf.keras.layers.Conv2D(64, 3, activation="relu")(x)
    x = tf.keras.layers.Flatten()(x)
    x = tf.keras.layers.Dense(64, activation="relu")(x)
    # float32 softmax (and loss) under a mixed-precision policy: 16-bit probabilities round to 0 or 1.
    outputs = tf.keras.layers.Dense(num_classes, activation="softmax", dtype="float32", name="probabilities")(x)
    model = tf.keras.Model(inputs, outputs, name="fashion_cnn")
    model.compile(optimizer=build_optimizer(optimizer, learning_rate, weight_decay),
                  loss="categorical_crossentropy",
                  metrics=["accuracy"])
    return model
