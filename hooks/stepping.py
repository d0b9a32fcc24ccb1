"""A base for hooks that label their figures with the global step, and a hook counting a task's own steps."""
import logging

import tensorflow as tf
from tensorflow.python.training import training_util


class StepCountingHook(tf.estimator.SessionRunHook):
    """Knows the global step after each run. Where this worker alone advances it (one machine,
    synchronous workers) it is read once when the session starts, then counted by `count_step()`
    in after_run, exact without a fetch. Where parameter servers hold it, other workers advance it
    too (asynchronous training): then it is read at every run, fetched with the hook's own tensors
    (`step_args`), as TensorFlow's StopAtStepHook reads it. `global_step` is the global step after
    the last run."""

    def __init__(self):
        self.global_step = 0
        self._global_step_tensor = None
        self._step_read = None

    def begin(self):
        self._global_step_tensor = tf.compat.v1.train.get_global_step()
        on_ps = self._global_step_tensor is not None and "/job:ps" in (self._global_step_tensor.device or "")
        self._step_read = training_util._get_or_create_global_step_read() if on_ps else None  # noqa: SLF001

    @property
    def asynchronous(self):
        """True when other workers advance the global step too (it sits on a parameter server)."""
        return self._step_read is not None

    def after_create_session(self, session, coord):
        if self._global_step_tensor is not None:
            self.global_step = int(session.run(self._global_step_tensor))

    @staticmethod
    def training_loss():
        """Returns the Estimator's training loss tensor (its LOSSES collection), or None outside one."""
        losses = tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.LOSSES)
        return losses[0] if losses else None

    def step_args(self, fetches=None):
        """Returns before_run's SessionRunArgs for `fetches` (None: nothing), with the global step
        added under asynchronous training; count_step gives `fetches`' values back."""
        if self._step_read is None:
            return None if fetches is None else tf.estimator.SessionRunArgs(fetches)
        both = {"global_step": self._step_read}
        if fetches is not None:  # a fetch of None is refused
            both["fetched"] = fetches
        return tf.estimator.SessionRunArgs(both)

    def count_step(self, run_values=None):
        """Counts one run; call it first thing in after_run. Returns the values of the fetches
        step_args asked for (None without any)."""
        results = run_values.results if run_values is not None else None
        if self._step_read is not None and isinstance(results, dict):
            self.global_step = int(results["global_step"]) + 1  # read before this run's increment
            return results.get("fetched")
        self.global_step += 1
        return results


class OwnStepsHook(StepCountingHook):
    """Counts the steps this task runs itself and, when its session ends, logs

        worker 0 ran 212 steps, from global step 31 to 803

    Under asynchronous training (parameter servers) the trainers' shares of the global steps differ:
    a worker that joined late has a small one."""

    def __init__(self, label):
        super().__init__()
        self.label, self.steps, self.first_global_step = label, 0, None

    def before_run(self, run_context):
        return self.step_args()

    def after_run(self, run_context, run_values):
        self.count_step(run_values)
        self.steps += 1
        if self.first_global_step is None:
            self.first_global_step = self.global_step

    def end(self, session):
        if self.steps:
            logging.getLogger(__name__).info("%s ran %d steps, from global step %d to %d", self.label, self.steps,
                                             self.first_global_step, self.global_step)
        else:
            logging.getLogger(__name__).info("%s ran no step", self.label)
