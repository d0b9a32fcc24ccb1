"""The learning rate as a function of the global step: warm-up, then constant, cosine or step decay."""
import math

import tensorflow as tf

from models import LR_SCHEDULES

COLLECTION = "learning_rate"  # where each call leaves its tensor, for hooks that report the applied rate
STEP_DECAY_AT = (0.5, 0.75)  # fractions of training after which 'step' multiplies the rate by 0.1


@tf.keras.utils.register_keras_serializable(package="pipeline")
class ScheduledRate(tf.keras.optimizers.schedules.LearningRateSchedule):
    """`base_rate` after a linear warm-up of `warm_up_steps` (Goyal et al. 2017: from
    base/warm_up_steps up to base), then 'constant', 'cosine' decay to 0 at `total_steps`,
    or 'step' decay (x0.1 at half and at three quarters of `total_steps`).

    Keras optimizers call it with their iteration count, which model_to_estimator
    ties to the global step; as a schedule, not a variable, the rate is never
    restored from a checkpoint: a resumed run applies the rate its flags give.
    In graph mode each call (outside a function's graph) adds its tensor to the collection COLLECTION.
    """

    def __init__(self, base_rate, total_steps, kind="constant", warm_up_steps=0):
        if kind not in LR_SCHEDULES:
            raise ValueError(f"unknown learning-rate schedule {kind!r}; known: {', '.join(LR_SCHEDULES)}")
        self.base_rate, self.total_steps, self.kind = float(base_rate), int(total_steps), kind
        self.warm_up_steps = int(warm_up_steps)

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        rate = tf.constant(self.base_rate, tf.float32)
        decay_steps = float(max(1, self.total_steps - self.warm_up_steps))
        after_warm_up = tf.maximum(0.0, step - self.warm_up_steps)
        if self.kind == "cosine":
            rate = rate * 0.5 * (1.0 + tf.cos(math.pi * tf.minimum(1.0, after_warm_up / decay_steps)))
        elif self.kind == "step":
            passed = tf.add_n([tf.cast(step >= round(f * self.total_steps), tf.float32) for f in STEP_DECAY_AT])
            rate = rate * tf.pow(0.1, passed)
        if self.warm_up_steps:
            rate = rate * tf.minimum(1.0, (step + 1.0) / self.warm_up_steps)
        rate = tf.identity(rate, name="learning_rate")
        # Not from inside a function's graph (fp16's loss-scaling optimizer applies the update in a
        # tf.cond branch): a tensor there cannot be fetched from the session.
        if not tf.executing_eagerly() and not tf.compat.v1.get_default_graph().building_function:
            tf.compat.v1.add_to_collection(COLLECTION, rate)
        return rate

    def get_config(self):
        return {"base_rate": self.base_rate, "total_steps": self.total_steps, "kind": self.kind,
                "warm_up_steps": self.warm_up_steps}

    def describe(self):
        """Returns the schedule in words, for the run's header."""
        warm_up = f" after a {self.warm_up_steps}-step linear warm-up" if self.warm_up_steps else ""
        decay = {"constant": "constant", "cosine": f"cosine decay to 0 at step {self.total_steps}",
                 "step": "x0.1 at steps " + ", ".join(str(round(f * self.total_steps)) for f in STEP_DECAY_AT)}
        return f"{decay[self.kind]}{warm_up}"
