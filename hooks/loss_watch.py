"""A SessionRunHook that stops a diverging run and warns about a rising loss."""
import logging
import math
import statistics

import tensorflow as tf

from hooks.stepping import StepCountingHook

log = logging.getLogger(__name__)


class DivergenceError(Exception):
    """The training loss became NaN or infinite; `step` is the global step it happened at."""

    def __init__(self, step, loss):
        super().__init__(f"the training loss became {loss} at global step {step}")
        self.step, self.loss = step, loss


class LossWatchHook(StepCountingHook):
    """Watches the training loss (the Estimator's, from the LOSSES collection) at every step.

    A NaN or infinite loss raises DivergenceError at once. The Estimator runs its
    chief-only hooks, the checkpoint saver among them, before this one, so the
    step's checkpoint of the diverged weights may already be written: the run
    loop sets such checkpoints aside (pipeline.model_dir.set_aside_diverged).
    The rule for a rising loss: the mean loss of a
    window of `window_steps` steps more than `rise_factor` times the mean of the
    run's first window is logged as a warning and kept in `warnings`, once per
    window.
    """

    def __init__(self, window_steps=100, rise_factor=2.0):
        super().__init__()
        self.window_steps, self.rise_factor = window_steps, rise_factor
        self.first_window_mean = None
        self.warnings = []
        self._window, self._loss = [], None

    def begin(self):
        super().begin()
        self._loss = self.training_loss()

    def before_run(self, run_context):
        return tf.estimator.SessionRunArgs(self._loss) if self._loss is not None else None

    def after_run(self, run_context, run_values):
        self.count_step()
        loss = run_values.results
        if loss is None:
            return
        if not math.isfinite(loss):
            raise DivergenceError(self.global_step, loss)
        self._window.append(float(loss))
        if len(self._window) < self.window_steps:
            return
        mean = statistics.fmean(self._window)
        self._window = []
        if self.first_window_mean is None:
            self.first_window_mean = mean
        elif mean > self.rise_factor * self.first_window_mean:
            warning = (f"the mean training loss of the {self.window_steps} steps to global step "
                       f"{self.global_step} is {mean:.4g}, over {self.rise_factor:g}x its first window's {self.first_window_mean:.4g}: "
                       "training may be diverging (a learning rate too high?)")
            log.warning(warning)
            self.warnings.append(warning)
