"""The figures of a measurement's timed steps, as every engine reports them."""
import statistics
import time

import tensorflow as tf

from hooks.examples_per_second import throughput


def step_figures(step_times, global_batch, cpu_times, span_start, span_end):
    """Returns hooks.examples_per_second.throughput's figures (over the steps' own windows) and:

    images_per_sec_span: images over the wall time from the first timed step's start
    to the last one's end, everything between steps included (hooks, Python, the
    next call): the honest rate, and the one engines are compared with the limit by;
    images_per_sec_median: the global batch over the median step window, which a step
    slowed down by another process hardly moves (on a shared machine, a steadier
    comparison of engines that time single steps; the limit times calls of several);
    span_unix: the timed span's start and end in seconds since the epoch, by which other
    records of the same process (oneDNN's verbose log, benchmark.kernels) find its steps.
    `span_start` and `span_end` are time.perf_counter() readings.
    """
    figures = throughput(step_times, global_batch, cpu_times)
    figures["images_per_sec_median"] = global_batch / statistics.median(step_times)
    figures["images_per_sec_span"] = global_batch * len(step_times) / (span_end - span_start)
    to_unix = time.time() - time.perf_counter()
    figures["span_unix"] = (span_start + to_unix, span_end + to_unix)
    return figures


class SpanHook(tf.estimator.SessionRunHook):
    """Notes the wall time from the start of run `warm_up_steps` + 1 to the end of the last run;
    listed last, its after_run follows every other hook's."""

    def __init__(self, warm_up_steps, clock=time.perf_counter):
        self.warm_up_steps, self._clock = warm_up_steps, clock
        self.started = self.stopped = None
        self._runs = 0

    def before_run(self, run_context):
        self._runs += 1
        if self._runs == self.warm_up_steps + 1:
            self.started = self._clock()

    def after_run(self, run_context, run_values):
        self.stopped = self._clock()
