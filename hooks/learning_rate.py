"""A SessionRunHook that reads back the learning rate the optimizer applies."""
import tensorflow as tf

from models.learning_rate import COLLECTION


class LearningRateHook(tf.estimator.SessionRunHook):
    """Fetches the learning-rate tensor the optimizer built (collection COLLECTION) at each
    step: `first` and `last` hold the rates applied at the run's first and last steps, and
    given `output_dir` it writes the TensorBoard scalar `learning_rate` every `every_n_steps`
    global steps. Without such a tensor (a plain float rate) it does nothing."""

    def __init__(self, output_dir=None, every_n_steps=100):
        self.output_dir, self.every_n_steps = output_dir, every_n_steps
        self.first = self.last = None
        self._rate = self._global_step = self._writer = None
        self._step = 0

    def begin(self):
        rates = tf.compat.v1.get_collection(COLLECTION)
        self._rate = rates[0] if rates else None
        self._global_step = tf.compat.v1.train.get_global_step()
        if self.output_dir and self._rate is not None:
            self._writer = tf.compat.v1.summary.FileWriterCache.get(self.output_dir)

    def after_create_session(self, session, coord):
        self._step = int(session.run(self._global_step))

    def before_run(self, run_context):
        return tf.estimator.SessionRunArgs(self._rate) if self._rate is not None else None

    def after_run(self, run_context, run_values):
        # The rate fetched is the one applied in this step, which moves the global step to _step + 1.
        if self._rate is None:
            return
        self.last = float(run_values.results)
        self.first = self.last if self.first is None else self.first
        if self._writer is not None and self._step % self.every_n_steps == 0:
            self._writer.add_summary(tf.compat.v1.Summary(value=[
                tf.compat.v1.Summary.Value(tag="learning_rate", simple_value=self.last)]), self._step)
        self._step += 1

    def end(self, session):
        if self._writer is not None:
            self._writer.flush()
