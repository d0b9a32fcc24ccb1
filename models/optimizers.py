"""The optimizer the models compile with, and the precision they compute in."""
import contextlib

import tensorflow as tf

from models import GRAPH_REWRITE_PRECISIONS, PRECISIONS

ONEDNN_BF16_REWRITE = "auto_mixed_precision_onednn_bfloat16"  # Grappler's option (RewriterConfig's field)


@tf.keras.utils.register_keras_serializable(package="pipeline")
class Adam(tf.keras.optimizers.legacy.Adam):
    """Legacy Keras Adam that also trains mixed-precision models under model_to_estimator and a
    tf.distribute strategy.

    A legacy optimizer, because model_to_estimator needs a graph-mode one, and unlike
    tf.compat.v1.train optimizers it applies the same update on N mirrored replicas as
    on one. Under a mixed policy Keras wraps each variable in an AutoCastVariable; the
    Estimator builds the model once per replica, so each replica holds its own wrapper
    of the same mirrored variable, and Keras's cross-replica apply, which needs one
    object per variable, fails ("colocate_vars_with must only be passed a variable
    created in this tf.distribute.Strategy.scope()"). The updates are applied to the
    float32 variables inside the wrappers, as Keras does without a strategy.
    """

    def apply_gradients(self, grads_and_vars, name=None, experimental_aggregate_gradients=True):
        grads_and_vars = [(grad, getattr(var, "_variable", var)) for grad, var in grads_and_vars]
        return super().apply_gradients(grads_and_vars, name, experimental_aggregate_gradients)


@contextlib.contextmanager
def precision(name):
    """While entered, models are built in precision `name` ('fp32', 'bf16', 'fp16' or 'bf16-amp'): the
    Keras policy float32, mixed_bfloat16 or mixed_float16 (variables in float32, computations in the
    16-bit type; Keras compiles an fp16 model with a dynamic loss-scaling optimizer). Under 'bf16-amp'
    the model is float32 and tf.function graphs (Keras fit, custom loops) get TensorFlow's oneDNN
    bfloat16 rewrite; an Estimator's sessions get it from their config (pipeline.estimator.session_config),
    which overrides these global options."""
    previous = tf.keras.mixed_precision.global_policy()
    rewrites = name in GRAPH_REWRITE_PRECISIONS
    rewrite_before = tf.config.optimizer.get_experimental_options().get(ONEDNN_BF16_REWRITE)  # None: the default
    tf.keras.mixed_precision.set_global_policy(PRECISIONS[name])
    if rewrites:
        tf.config.optimizer.set_experimental_options({ONEDNN_BF16_REWRITE: True})
    try:
        yield
    finally:
        tf.keras.mixed_precision.set_global_policy(previous)
        if rewrites:
            tf.config.optimizer.set_experimental_options({ONEDNN_BF16_REWRITE: rewrite_before})
