"""A trivially small stand-in for a job's model, for measuring what an engine does per step
beyond the step's own computation (the host work that decides a GPU's throughput)."""
import tensorflow as tf

from models.optimizers import Adam


class TinyModelTask:
    """The job `task` (its data, input_fn and flags) with its model replaced by a linear softmax
    classifier on the same input: Flatten and one Dense layer, Adam, categorical cross-entropy
    and accuracy, as the job's model is compiled. Its step computes next to nothing, so an
    engine's time per step is its overhead; the limit engine gives the step's own time."""

    def __init__(self, task):
        self._task = task
        self.name = f"{task.name}-tiny"

    def __getattr__(self, name):
        return getattr(self._task, name)

    def build_model(self, args, learning_rate):
        """Returns the compiled tiny model with the job model's input (name, shape, dtype) and classes."""
        model = self._task.build_model(args, learning_rate)
        inputs = tf.keras.Input(shape=model.input_shape[1:], dtype=model.inputs[0].dtype, name=model.input_names[0])
        x = tf.keras.layers.Flatten()(tf.cast(inputs, tf.float32) if inputs.dtype != tf.float32 else inputs)
        outputs = tf.keras.layers.Dense(model.output_shape[-1], activation="softmax", dtype="float32",
                                        name=model.output_names[0])(x)
        tiny = tf.keras.Model(inputs, outputs, name="tiny_model")
        tiny.compile(optimizer=Adam(learning_rate=learning_rate), loss="categorical_crossentropy",
                     metrics=["accuracy"])
        return tiny
