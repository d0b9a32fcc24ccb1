"""A SessionRunHook that reads back the learning rate the optimizer applies."""
import tensorflow as tf

from hooks.stepping import StepCountingHook
from models.learning_rate import COLLECTION


class LearningRateHook(StepCountingHook):
    """Fetches the learning-rate tensor the optimizer built (collection COLLECTION) at each
    step: `first` and `last` hold the rates applied at the run's first and last steps, and
    given `output_dir` it writes the TensorBoard scalar `learning_rate` every `every_n_steps`
    global steps. Without such a tensor (a plain float rate) it does nothing."""

    def __init__(self, output_dir=None, every_n_steps=100):
        super().__init__()
        self.output_dir, self.every_n_steps = output_dir, every_n_steps
        self.first = self.last = None
        self._rate = self._writer = None

    def begin(self):
        super().begin()
        rates = tf.compat.v1.get_collection(COLLECTION)
        self._rate = rates[0] if rates else None
        if self.output_dir and self._rate is not None:
            self._writer = tf.compat.v1.summary.FileWriterCache.get(self.output_dir)

    def before_run(self, run_context):
        return self.step_args(self._rate)

    def after_run(self, run_context, run_values):
        previous = self.global_step
        rate = self.count_step(run_values)
        if self._rate is None:
            return
        # The rate fetched was applied in this step, labelled with the step it was applied at (before counting).
        applied_at = self.global_step - 1
        self.last = float(rate)
        self.first = self.last if self.first is None else self.first
        # Every multiple of every_n_steps reached (other workers advance the step too, under parameter servers).
        if self._writer is not None and applied_at // self.every_n_steps > (previous - 1) // self.every_n_steps:
            self._writer.add_summary(tf.compat.v1.Summary(value=[
                tf.compat.v1.Summary.Value(tag="learning_rate", simple_value=self.last)]), applied_at)

    def end(self, session):
        if self._writer is not None:
            self._writer.flush()
