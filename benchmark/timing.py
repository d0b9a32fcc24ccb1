"""The figures of a measurement's timed steps, as every engine reports them."""
import statistics

from hooks.examples_per_second import throughput


def step_figures(step_times, global_batch, cpu_times):
    """Returns hooks.examples_per_second.throughput's figures and images_per_sec_median: the global
    batch over the median step time, which a step slowed down by another process hardly moves (on a
    shared machine, the figure to compare engines by; images_per_sec, over the total time, counts
    every slow step)."""
    figures = throughput(step_times, global_batch, cpu_times)
    figures["images_per_sec_median"] = global_batch / statistics.median(step_times)
    return figures
