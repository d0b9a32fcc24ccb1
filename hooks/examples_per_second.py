"""A SessionRunHook that measures training throughput in examples (images) per second."""
import logging
import math
import time

import tensorflow as tf

from hooks.stepping import StepCountingHook

log = logging.getLogger(__name__)


class ExamplesPerSecondHook(StepCountingHook):
    """Times each training step and reports images/sec over the global batch.

    Unlike the design write-up's hook it skips `warm_up_steps` steps (graph
    initialisation and autotuning would otherwise be counted) and multiplies
    the step rate by the global batch (every replica's images), never dividing
    by the replica count. Every `every_n_steps` timed steps, and for the last
    steps at the end, it logs the window's throughput with its spread (at debug
    level: hooks.progress gives a person the speed) and, given `output_dir`,
    writes it as the TensorBoard scalar `images_per_sec`,
    labelled with the exact global step (see StepCountingHook). A step is timed from this hook's before_run to its
    after_run. The Estimator runs its own hooks' after_run first, its checkpoint
    saver among them: given `excluded_time` (an object whose `seconds` grows by
    the time spent elsewhere, such as a CheckpointTimer listening to that
    saver), the time it grew by during a step is left out. The summary and
    step-counter hooks only queue small events.

    After training, `step_times` holds every timed step's seconds,
    `cpu_times` the process CPU seconds spent meanwhile (all threads, the input
    pipeline's included) and `summary()` the figures over the whole run.
    """

    def __init__(self, global_batch_size, every_n_steps=100, warm_up_steps=10,
                 output_dir=None, clock=time.perf_counter, cpu_clock=time.process_time, excluded_time=None):
        super().__init__()
        if global_batch_size <= 0:
            raise ValueError(f"global_batch_size must be positive, got {global_batch_size}")
        self.global_batch_size = global_batch_size
        self.every_n_steps = every_n_steps
        self.warm_up_steps = warm_up_steps
        self.output_dir = output_dir
        self._clock = clock
        self._cpu_clock = cpu_clock
        self._excluded_time = excluded_time
        self.step_times = []
        self.cpu_times = []
        self._steps_seen = 0
        self._reported = 0  # step_times[self._reported:] is the window not yet reported
        self._start = None
        self._writer = None

    def begin(self):
        super().begin()
        if self.output_dir:
            self._writer = tf.compat.v1.summary.FileWriterCache.get(self.output_dir)

    def _excluded(self):
        return self._excluded_time.seconds if self._excluded_time is not None else 0.0

    def before_run(self, run_context):
        self._excluded_start = self._excluded()
        self._start = self._clock()
        self._cpu_start = self._cpu_clock()
        return self.step_args()

    def after_run(self, run_context, run_values):
        excluded = self._excluded() - self._excluded_start
        elapsed = self._clock() - self._start - excluded
        cpu = max(0.0, self._cpu_clock() - self._cpu_start - excluded)
        self.count_step(run_values)
        self._steps_seen += 1
        if self._steps_seen <= self.warm_up_steps:
            return
        self.step_times.append(elapsed)
        self.cpu_times.append(cpu)
        if len(self.step_times) - self._reported >= self.every_n_steps:
            self._report_window()

    def end(self, session):
        if len(self.step_times) > self._reported:  # the last, partial window
            self._report_window()
        if self._writer is not None:
            self._writer.flush()

    def _report_window(self):
        step_times, global_step = self.step_times[self._reported:], self.global_step
        self._reported = len(self.step_times)
        figures = throughput(step_times, self.global_batch_size)
        log.debug("step %s: %.1f images/sec (+/- %.1f over %d steps, %.4f s/step)",
                 global_step, figures["images_per_sec"], figures["images_per_sec_std"],
                 len(step_times), figures["step_time_mean"])
        if self._writer is not None:
            summary = tf.compat.v1.Summary(value=[
                tf.compat.v1.Summary.Value(tag="images_per_sec", simple_value=figures["images_per_sec"])])
            self._writer.add_summary(summary, global_step)

    def summary(self):
        """Returns throughput figures over all timed steps (see `throughput`), or None before any."""
        if not self.step_times:
            return None
        return throughput(self.step_times, self.global_batch_size, self.cpu_times)


def throughput(step_times, global_batch_size, cpu_times=None):
    """Returns a dict of throughput figures for steps of `global_batch_size` images.

    images_per_sec is total images over total time; images_per_sec_std is the
    standard deviation of the per-step rates; step times are in seconds;
    cpu_seconds_per_image (None without `cpu_times`) is process CPU time per image.
    """
    n = len(step_times)
    total = sum(step_times)
    rates = [global_batch_size / t for t in step_times if t > 0]
    mean_rate = sum(rates) / len(rates) if rates else float("nan")
    variance = sum((r - mean_rate) ** 2 for r in rates) / len(rates) if rates else float("nan")
    return {
        "timed_steps": n,
        "images_per_sec": global_batch_size * n / total if total > 0 else float("nan"),
        "images_per_sec_std": math.sqrt(variance),
        "step_time_mean": total / n,
        "step_time_min": min(step_times),
        "step_time_max": max(step_times),
        "timed_seconds": total,
        "cpu_seconds_per_image": sum(cpu_times) / (n * global_batch_size) if cpu_times else None,
    }
