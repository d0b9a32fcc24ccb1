"""A base for hooks that label their figures with the global step."""
import tensorflow as tf


class StepCountingHook(tf.estimator.SessionRunHook):
    """Knows the global step without fetching it at every step: it is read once when the
    session starts, then counted by `count_step()` in after_run. `global_step` is the global
    step after the last run (exact, where each run advances it by one)."""

    def __init__(self):
        self.global_step = 0
        self._global_step_tensor = None

    def begin(self):
        self._global_step_tensor = tf.compat.v1.train.get_global_step()

    def after_create_session(self, session, coord):
        if self._global_step_tensor is not None:
            self.global_step = int(session.run(self._global_step_tensor))

    @staticmethod
    def training_loss():
        """Returns the Estimator's training loss tensor (its LOSSES collection), or None outside one."""
        losses = tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.LOSSES)
        return losses[0] if losses else None

    def count_step(self):
        """Counts one run; call it first thing in after_run."""
        self.global_step += 1
