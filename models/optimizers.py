"""The optimizers the models compile with, and the precision they compute in."""
import contextlib

import tensorflow as tf

from models import GRAPH_REWRITE_PRECISIONS, OPTIMIZERS, PRECISIONS, SGD_MOMENTUM

ONEDNN_BF16_REWRITE = "auto_mixed_precision_onednn_bfloat16"  # Grappler's option (RewriterConfig's field)


class _PipelineOptimizer:
    """What the pipeline's legacy Keras optimizers add to Keras's: they train mixed-precision models under
    model_to_estimator and a tf.distribute strategy, and apply decoupled weight decay.

    Legacy Keras optimizers, because model_to_estimator needs graph-mode ones, and unlike
    tf.compat.v1.train optimizers they apply the same update on N mirrored replicas as
    on one. Under a mixed policy Keras wraps each variable in an AutoCastVariable; the
    Estimator builds the model once per replica, so each replica holds its own wrapper
    of the same mirrored variable, and Keras's cross-replica apply, which needs one
    object per variable, fails ("colocate_vars_with must only be passed a variable
    created in this tf.distribute.Strategy.scope()"). The updates are applied to the
    float32 variables inside the wrappers, as Keras does without a strategy.

    `weight_decay` W (0: none) is decoupled from the gradient (Loshchilov and Hutter's AdamW and SGDW): each
    step multiplies every weight of two or more dimensions (kernels; not biases nor normalisation scales) by
    (1 - rate x W), at the rate the step applies, before the optimizer's own update. Keras clones the
    optimizer from get_config when model_to_estimator builds the model, so W is part of the config.
    """

    def __init__(self, *args, weight_decay=0.0, **kwargs):
        super().__init__(*args, **kwargs)
        self.weight_decay = float(weight_decay)

    def apply_gradients(self, grads_and_vars, name=None, experimental_aggregate_gradients=True):
        return super().apply_gradients(_unwrapped(grads_and_vars), name, experimental_aggregate_gradients)

    def _aggregate_gradients(self, grads_and_vars):
        # fp16's LossScaleOptimizer sums the gradients through this before apply_gradients: with each replica's
        # wrapper as the destination, the sum's devices are the primary replica's alone, and NcclAllReduce, whose
        # condition is that they match the gradients', falls back to reducing on one GPU.
        return super()._aggregate_gradients(_unwrapped(grads_and_vars))

    def _resource_apply_dense(self, grad, var, apply_state=None):
        with tf.control_dependencies(self._decay(grad, var, apply_state)):
            return super()._resource_apply_dense(grad, var, apply_state)

    def _resource_apply_sparse(self, grad, var, indices, apply_state=None):
        with tf.control_dependencies(self._decay(grad, var, apply_state)):
            return super()._resource_apply_sparse(grad, var, indices, apply_state)

    def _decay(self, grad, var, apply_state):
        """Returns [the op that decays `var` by the step's rate], or [] where no decay applies to it. In a graph
        nothing orders a write after the step's reads of `var` but what the write depends on: like the
        optimizer's own update, the decay waits for `grad`, which the forward pass's reads of `var` feed."""
        if not self.weight_decay or var.shape.rank < 2:
            return []
        var_device, var_dtype = var.device, var.dtype.base_dtype
        coefficients = (apply_state or {}).get((var_device, var_dtype)) or \
            self._fallback_apply_state(var_device, var_dtype)
        factor = coefficients["lr_t"] * tf.cast(self.weight_decay, var_dtype)
        with tf.control_dependencies([grad]):
            return [var.assign_sub(factor * var.read_value(), read_value=False)]

    def get_config(self):
        return {**super().get_config(), "weight_decay": self.weight_decay}


def _unwrapped(grads_and_vars):
    """Returns `grads_and_vars` with each AutoCastVariable replaced by the float32 variable it wraps."""
    return [(grad, getattr(var, "_variable", var)) for grad, var in grads_and_vars]


@tf.keras.utils.register_keras_serializable(package="pipeline")
class Adam(_PipelineOptimizer, tf.keras.optimizers.legacy.Adam):
    """Legacy Keras Adam, with what _PipelineOptimizer adds (AdamW with a weight_decay)."""


@tf.keras.utils.register_keras_serializable(package="pipeline")
class SGD(_PipelineOptimizer, tf.keras.optimizers.legacy.SGD):
    """Legacy Keras SGD, with what _PipelineOptimizer adds (SGDW with a weight_decay)."""


def build_optimizer(name, learning_rate, weight_decay=0.0):
    """Returns the optimizer `name` (models.OPTIMIZERS: 'adam', or 'sgd' with Nesterov momentum SGD_MOMENTUM)
    at `learning_rate` (a float or a schedule) with decoupled `weight_decay` (see _PipelineOptimizer)."""
    if name == "adam":
        return Adam(learning_rate=learning_rate, weight_decay=weight_decay)
    if name == "sgd":
        return SGD(learning_rate=learning_rate, momentum=SGD_MOMENTUM, nesterov=True, weight_decay=weight_decay)
    raise ValueError(f"no optimizer {name!r}; one of {', '.join(OPTIMIZERS)}")


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
