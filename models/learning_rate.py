"""The learning rate as a function of training progress: warm-up, then constant, cosine or step decay."""
import math

import tensorflow as tf

from models import LR_SCHEDULES

COLLECTION = "learning_rate"  # where each call leaves its tensor, for hooks that report the applied rate
STEP_DECAY_AT = (0.5, 0.75)  # fractions of training after which 'step' multiplies the rate by 0.1


@tf.keras.utils.register_keras_serializable(package="pipeline")
class ScheduledRate(tf.keras.optimizers.schedules.LearningRateSchedule):
    """`base_rate` after a linear warm-up over `warm_up_images` (Goyal et al. 2017: from
    base x one step's images / warm_up_images up to base), then 'constant', 'cosine' decay
    to 0 at `total_images`, or 'step' decay (x0.1 at half and three quarters of `total_images`).

    Progress is counted in images trained, not steps, so that a run resumed with
    another global batch (more replicas, another --batch-size) goes on where the
    schedule stood: at global step s it has trained
    images_at_start + (s - start_step) x images_per_step images, where this run
    started at `start_step` having trained `images_at_start`. With the defaults
    (images_per_step 1, from step 0) images are steps.

    Keras optimizers call it with their iteration count, which model_to_estimator
    ties to the global step; as a schedule, not a variable, the rate is never
    restored from a checkpoint: a resumed run applies the rate its flags give.
    In graph mode each call (outside a function's graph) adds its tensor to the collection COLLECTION.
    """

    def __init__(self, base_rate, total_images, kind="constant", warm_up_images=0, images_per_step=1,
                 start_step=0, images_at_start=0):
        if kind not in LR_SCHEDULES:
            raise ValueError(f"unknown learning-rate schedule {kind!r}; known: {', '.join(LR_SCHEDULES)}")
        self.base_rate, self.total_images, self.kind = float(base_rate), int(total_images), kind
        self.warm_up_images, self.images_per_step = int(warm_up_images), int(images_per_step)
        self.start_step, self.images_at_start = int(start_step), int(images_at_start)

    def images_at(self, step):
        """Returns the images trained at global `step` (a number or a tensor)."""
        return self.images_at_start + (step - self.start_step) * self.images_per_step

    def step_at(self, images):
        """Returns the first global step of this run at which `images` have been trained."""
        return self.start_step + max(0, math.ceil((images - self.images_at_start) / self.images_per_step))

    def __call__(self, step):
        images = self.images_at(tf.cast(step, tf.float64))  # float64: exact beyond 2**24 images
        rate = tf.constant(self.base_rate, tf.float64)
        decay_images = float(max(1, self.total_images - self.warm_up_images))
        after_warm_up = tf.maximum(images - self.warm_up_images, 0.0)
        if self.kind == "cosine":
            rate = rate * 0.5 * (1.0 + tf.cos(math.pi * tf.minimum(after_warm_up / decay_images, 1.0)))
        elif self.kind == "step":
            passed = tf.add_n([tf.cast(images >= round(f * self.total_images), tf.float64) for f in STEP_DECAY_AT])
            rate = rate * tf.pow(tf.constant(0.1, tf.float64), passed)
        if self.warm_up_images:
            rate = rate * tf.minimum((images + self.images_per_step) / self.warm_up_images, 1.0)
        rate = tf.identity(tf.cast(rate, tf.float32), name="learning_rate")
        # Not from inside a function's graph (fp16's loss-scaling optimizer applies the update in a
        # tf.cond branch): a tensor there cannot be fetched from the session.
        if not tf.executing_eagerly() and not tf.compat.v1.get_default_graph().building_function:
            tf.compat.v1.add_to_collection(COLLECTION, rate)
        return rate

    def get_config(self):
        return {"base_rate": self.base_rate, "total_images": self.total_images, "kind": self.kind,
                "warm_up_images": self.warm_up_images, "images_per_step": self.images_per_step,
                "start_step": self.start_step, "images_at_start": self.images_at_start}

    def describe(self):
        """Returns the schedule in words, with the global steps of this run where it changes, for the header."""
        warm_up = (f" after a linear warm-up over {self.warm_up_images} images (to step "
                   f"{self.step_at(self.warm_up_images)})" if self.warm_up_images else "")
        decay = {"constant": "constant",
                 "cosine": f"cosine decay to 0 at {self.total_images} images (step {self.step_at(self.total_images)})",
                 "step": "x0.1 at steps " + ", ".join(str(self.step_at(round(f * self.total_images)))
                                                      for f in STEP_DECAY_AT)}
        return f"{decay[self.kind]}{warm_up}"
