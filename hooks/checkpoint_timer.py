"""A checkpoint-saver listener that measures the time spent writing checkpoints."""
import time

import tensorflow as tf

from acquisition import faults


class CheckpointTimer(tf.estimator.CheckpointSaverListener):
    """Adds up the wall seconds of each checkpoint write (`seconds`) and counts them (`saves`)."""

    def __init__(self, clock=time.perf_counter):
        self._clock = clock
        self.seconds, self.saves = 0.0, 0
        self._start = None

    def before_save(self, session, global_step_value):
        faults.point("checkpoint")
        self._start = self._clock()

    def after_save(self, session, global_step_value):
        self.seconds += self._clock() - self._start
        self.saves += 1
