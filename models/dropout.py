"""Dropout that a resumed run repeats: its masks are a function of the seed, the global step and the
replica, not of a random stream that starts over in each process."""
import random

import tensorflow as tf

SEED_RANGE = 2 ** 31
# Step and replica share the stateless seed's second word: at most this many replicas.
MAX_REPLICAS = 1 << 10


def stream_dropout_layers(model):
    """Returns the names of `model`'s dropout layers that draw from a stateful stream (Keras's own, as
    tf.keras.applications build them: EfficientNet's drop-connect), which a resumed run cannot repeat."""
    return sorted(layer.name for layer in model.submodules
                  if isinstance(layer, tf.keras.layers.Dropout) and not isinstance(layer, StepSeededDropout))


class StepSeededDropout(tf.keras.layers.Dropout):
    """tf.keras.layers.Dropout whose training masks, in a graph with a global step (the Estimator's), come
    from tf.nn.experimental.stateless_dropout seeded by (seed, global step x MAX_REPLICAS + replica).

    Keras's Dropout draws from a stateful op: a graph-seeded stream that each new session (each launch of
    a run) starts from its first draw, so a resumed --deterministic run would drop other units than a run
    that never stopped. Without a global step (Keras fit, eager) it is Keras's own. `seed` None draws one
    from Python's random, which tf.keras.utils.set_random_seed seeds; get_config keeps it, so that the
    copy model_to_estimator builds draws the same masks."""

    def __init__(self, rate, noise_shape=None, seed=None, **kwargs):
        super().__init__(rate, noise_shape=noise_shape,
                         seed=random.randrange(SEED_RANGE) if seed is None else seed, **kwargs)

    def call(self, inputs, training=None):
        step = None if tf.executing_eagerly() else tf.compat.v1.train.get_global_step()
        if step is None:
            return super().call(inputs, training)
        if training is None:
            training = tf.keras.backend.learning_phase()

        def dropped():
            replica = tf.distribute.get_replica_context()
            index = replica.replica_id_in_sync_group if replica is not None else 0
            draw = tf.cast(step, tf.int64) * MAX_REPLICAS + tf.cast(index, tf.int64)
            seed = tf.stack([tf.constant(self.seed, tf.int64), draw])
            return tf.nn.experimental.stateless_dropout(inputs, self.rate, seed,
                                                        noise_shape=self._get_noise_shape(inputs))
        return tf.__internal__.smart_cond.smart_cond(training, dropped, lambda: tf.identity(inputs))
