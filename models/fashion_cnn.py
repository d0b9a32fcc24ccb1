"""The small CNN of the design write-up for 28x28 grayscale images."""
import tensorflow as tf


def build_fashion_cnn(learning_rate, input_shape=(28, 28, 1), num_classes=10, input_name="image"):
    """Returns the compiled CNN: three 3x3 convolutions, two poolings, a 64-unit dense layer.

    It is compiled with Adam, categorical cross-entropy on one-hot labels and
    an accuracy metric. The optimizer is a legacy Keras one: model_to_estimator
    needs a graph-mode optimizer, and unlike tf.compat.v1.train optimizers it
    applies the same update on N mirrored replicas as on one at the same global batch.
    The input layer is named so that the Estimator's feature key is stable.
    """
    inputs = tf.keras.Input(shape=input_shape, name=input_name)
    x = tf.keras.layers.Conv2D(32, 3, activation="relu")(inputs)
    x = tf.keras.layers.MaxPooling2D(pool_size=2, strides=2)(x)
    x = tf.keras.layers.Conv2D(64, 3, activation="relu")(x)
    x = tf.keras.layers.MaxPooling2D(pool_size=2, strides=2)(x)
    x = tf.keras.layers.Conv2D(64, 3, activation="relu")(x)
    x = tf.keras.layers.Flatten()(x)
    x = tf.keras.layers.Dense(64, activation="relu")(x)
    outputs = tf.keras.layers.Dense(num_classes, activation="softmax", name="probabilities")(x)
    model = tf.keras.Model(inputs, outputs, name="fashion_cnn")
    model.compile(optimizer=tf.keras.optimizers.legacy.Adam(learning_rate=learning_rate),
                  loss="categorical_crossentropy",
                  metrics=["accuracy"])
    return model
