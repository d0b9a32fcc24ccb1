"""Throughput benchmarks: replicas x batch sizes x data sources x engines, and the input alone.

Every configuration runs a fixed number of warm-up steps, then timed steps;
the sweep repeats all configurations `repeats` times, interleaved, so that
drifts of a shared machine spread over all of them, and the engines measured on
one setting take turns going first (repeat_order), so that none always runs
right after the same one. Training is timed by the
project's ExamplesPerSecondHook (Estimator, beside the run loop's loss watch and
progress line), an equivalent Keras callback (model.fit), around each step (the
custom loop) or around each call of several steps (the limit, custom_loop.py):
graph building and checkpoint writing fall outside.
"""
import copy
import dataclasses
import os
import tempfile
import time

import tensorflow as tf

from hooks.examples_per_second import ExamplesPerSecondHook
from hooks.loss_watch import LossWatchHook
from hooks.progress import ProgressHook
from benchmark.custom_loop import measure_custom_loop, measure_limit
from benchmark.timing import SpanHook, step_figures
from models.flops import model_flops_per_image
from models.optimizers import precision
from pipeline import batching, mfu as mfu_lib
from pipeline.distribution import build_distribution, split_cpu
from pipeline.errors import UsageError
from pipeline.estimator import estimator_from_keras, build_run_config, session_config
from pipeline.machine import conv_gradients_choice

# What the sweep chooses itself, so that no task recipe (the Fashion sample's) replaces it.
SWEEP_SETS = frozenset({"batch_size", "learning_rate", "lr_scaling"})
_NEVER = 10 ** 9  # a step count no benchmark reaches: no checkpoints or summaries while timing


@dataclasses.dataclass(frozen=True)
class Config:
    """One measured configuration."""
    engine: str  # one of benchmark.ENGINES, or 'input'
    data: str  # 'real' / 'synthetic', or an input variant
    replicas: int
    batch_size: int  # per replica (input-only: per batch)
    precision: str = "fp32"


def plan_configs(engines, data_sources, replica_counts, batch_sizes, input_variants=None, precisions=("fp32",)):
    """Returns the configurations of a sweep: training ones, or input-only ones if `input_variants`."""
    if input_variants:
        return [Config("input", v, 1, b) for b in batch_sizes for v in input_variants]
    return [Config(e, d, r, b, p) for p in precisions for b in batch_sizes for r in replica_counts
            for d in data_sources for e in engines]


def repeat_order(configs, repeat):
    """Returns `configs` in the order that repeat number `repeat` measures them: each run of
    consecutive configurations that differ only in engine is rotated by `repeat`."""
    groups = []
    for config in configs:
        if groups and dataclasses.replace(groups[-1][0], engine=config.engine) == config:
            groups[-1].append(config)
        else:
            groups.append([config])
    return [config for group in groups
            for config in group[repeat % len(group):] + group[:repeat % len(group)]]


class _KerasStepTimer(tf.keras.callbacks.Callback):
    """The Keras counterpart of ExamplesPerSecondHook: wall and CPU time of each step after warm-up."""

    def __init__(self, warm_up_steps):
        super().__init__()
        self.warm_up_steps = warm_up_steps
        self.step_times, self.cpu_times = [], []

    def on_train_batch_begin(self, batch, logs=None):
        self._start, self._cpu_start = time.perf_counter(), time.process_time()
        if batch == self.warm_up_steps:
            self.span_start = self._start

    def on_train_batch_end(self, batch, logs=None):
        if batch >= self.warm_up_steps:
            self.step_times.append(time.perf_counter() - self._start)
            self.cpu_times.append(time.process_time() - self._cpu_start)
            self.span_end = time.perf_counter()


def measure_estimator(task, task_args, plan, batch_size, warm_up_steps, timed_steps):
    """Returns (throughput figures, seconds of the whole train() call) of the Estimator pipeline,
    with the hooks that the run loop runs at every step: the loss watch and the progress line."""
    data = task.prepare_data(task_args, batch_size)
    global_batch = batch_size * plan.replicas
    with tempfile.TemporaryDirectory() as model_dir:
        config = build_run_config(model_dir, plan, checkpoint_steps=_NEVER, summary_steps=_NEVER,
                                  session=session_config(task_args.xla, task_args.intra_op_threads,
                                                         task_args.inter_op_threads, task_args.precision))
        estimator = estimator_from_keras(task.build_model(task_args, task_args.learning_rate), config,
                                         conv_gradients_by_matmul=task_args.conv_gradients == "matmul")
        hook = ExamplesPerSecondHook(global_batch, every_n_steps=_NEVER, warm_up_steps=warm_up_steps)
        steps = warm_up_steps + timed_steps
        run_loop_hooks = [LossWatchHook(task_args.log_steps), ProgressHook(steps, global_batch, task_args.log_steps)]
        span = SpanHook(warm_up_steps)
        start = time.perf_counter()
        estimator.train(data.train_input_fn, hooks=[hook] + run_loop_hooks + [span], max_steps=steps)
        figures = step_figures(hook.step_times, global_batch, hook.cpu_times, span.started, span.stopped)
        return figures, time.perf_counter() - start


def measure_keras(task, task_args, plan, batch_size, warm_up_steps, timed_steps):
    """Returns the same figures for the reference: Keras model.fit under the same strategy,
    model, input_fn and global batch (Keras splits one global batch between replicas)."""
    global_batch = batch_size * plan.replicas
    data = task.prepare_data(task_args, global_batch)
    with (plan.strategy or tf.distribute.get_strategy()).scope():
        model = task.build_model(task_args, task_args.learning_rate)
    if task_args.xla:
        model.jit_compile = True
    timer = _KerasStepTimer(warm_up_steps)
    start = time.perf_counter()
    model.fit(data.train_input_fn(), steps_per_epoch=warm_up_steps + timed_steps, epochs=1, verbose=0,
              callbacks=[timer])
    return (step_figures(timer.step_times, global_batch, timer.cpu_times, timer.span_start, timer.span_end),
            time.perf_counter() - start)


def measure_input(input_fn, batch_size, warm_up_steps, timed_steps):
    """Returns (throughput figures, seconds) of iterating `input_fn`'s dataset with no model."""
    start = time.perf_counter()
    iterator = iter(input_fn())
    for _ in range(warm_up_steps):
        next(iterator)
    step_times, cpu_times = [], []
    span_start = time.perf_counter()
    for _ in range(timed_steps):
        wall, cpu = time.perf_counter(), time.process_time()
        next(iterator)
        step_times.append(time.perf_counter() - wall)
        cpu_times.append(time.process_time() - cpu)
    return (step_figures(step_times, batch_size, cpu_times, span_start, time.perf_counter()),
            time.perf_counter() - start)


class InputVariants:
    """Builds the input_fns that --input-only compares (each task's own, see Task.input_variant)."""

    def __init__(self, task, task_args, workdir):
        self.task, self.workdir = task, workdir
        self.args = copy.copy(task_args)
        self.args.synthetic = False
        self.args.explicit_flags = SWEEP_SETS
        self._built = {}

    def _build(self, variant, batch_size):
        if (variant, batch_size) not in self._built:
            self._built[variant, batch_size] = self.task.input_variant(self.args, variant, batch_size, self.workdir)
        return self._built[variant, batch_size]

    def warm_up_steps(self, variant, batch_size, warm_up_steps):
        """Returns the warm-up for `variant`: a cached pipeline is timed only after its first epoch."""
        return max(warm_up_steps, self._build(variant, batch_size)[1])

    def input_fn(self, variant, batch_size):
        """Returns the input_fn of `variant` yielding batches of `batch_size`."""
        return self._build(variant, batch_size)[0]


def build_plans(replica_counts, use_gpus, strategy="mirrored"):
    """Returns the distribution plans of each replica count, splitting the CPU first if needed."""
    if strategy not in ("mirrored", "central_storage"):
        raise UsageError(f"the benchmark measures one machine: --strategy mirrored or central_storage, "
                         f"not {strategy}")
    if not use_gpus:
        split_cpu(max(replica_counts))
    return {r: build_distribution(gpus=r, strategy=strategy) if use_gpus
            else build_distribution(cpu_replicas=r, strategy=strategy) for r in replica_counts}


def run_sweep(task, task_args, configs, plans, repeats, warm_up_steps, timed_steps, log=print, rows=None):
    """Measures every configuration `repeats` times, interleaved; returns one row dict per measurement,
    appended to `rows` (when given) as each is made: a caller keeps those of a sweep that was stopped."""
    rows, peaks = ([] if rows is None else rows), {}
    training = [c for c in configs if c.engine != "input"]
    flops = model_flops_per_image(task.build_model(task_args, task_args.learning_rate)) if training else None
    with tempfile.TemporaryDirectory() as workdir:
        variants = InputVariants(task, task_args, workdir)
        total = len(configs) * repeats
        for repeat in range(repeats):
            for config in repeat_order(configs, repeat):
                rows.append(_measure(task, task_args, config, plans, variants, warm_up_steps, timed_steps, repeat))
                row = rows[-1]
                if config.engine != "input":
                    _add_mfu(row, flops, peaks, config, plans[config.replicas])
                log(f"[{len(rows)}/{total}] {row['engine']:11s} {row['precision']} {row['data']:16s} "
                    f"replicas {row['replicas']} "
                    f"batch {row['per_replica_batch_size']:4d}/replica: {row['images_per_sec']:9.1f} images/sec "
                    f"(+/- {row['images_per_sec_std']:.1f}), {1000 * row['cpu_seconds_per_image']:.2f} ms CPU/image"
                    + (f", MFU {row['mfu']:.2f}" if row.get("mfu") is not None else ""))
    return rows


def _add_mfu(row, flops, peaks, config, plan):
    """Sets a training row's FLOPs per image, the peak it is read against and its MFU."""
    key = (config.precision, tuple(plan.devices))
    if key not in peaks:
        peaks[key] = mfu_lib.peak_for(config.precision, plan.devices)
    row["train_flops_per_image"] = flops["training"]
    row["peak_flops"] = peaks[key].flops
    row["peak_source"] = peaks[key].source
    row["mfu"] = mfu_lib.mfu(row["images_per_sec"], flops["training"], peaks[key])


def _measure(task, task_args, config, plans, variants, warm_up_steps, timed_steps, repeat):
    plan = plans[config.replicas]
    if config.engine == "input":
        warm = variants.warm_up_steps(config.data, config.batch_size, warm_up_steps)
        figures, seconds = measure_input(variants.input_fn(config.data, config.batch_size), config.batch_size,
                                         warm, timed_steps)
    else:
        args = copy.copy(task_args)
        args.synthetic = config.data == "synthetic"
        if args.synthetic:  # generated pixels, never decoded or cached: the job refuses both with --synthetic
            for name, value in (("decode", "full"), ("cache", None)):
                if hasattr(args, name):
                    setattr(args, name, value)
        args.explicit_flags = SWEEP_SETS
        args.precision = config.precision
        # The Estimator's weight gradients as the job would compute them (--conv-gradients); the other
        # engines' are TensorFlow's.
        args.conv_gradients = "onednn" if config.engine != "estimator" else conv_gradients_choice(
            task_args.conv_gradients, config.precision, any("GPU" in device.upper() for device in plan.devices))[0]
        args.learning_rate = batching.scaled_learning_rate(
            task_args.learning_rate, config.batch_size * plan.replicas, task_args.reference_batch_size,
            task_args.lr_scaling)
        measure = {"estimator": measure_estimator, "keras": measure_keras, "custom_loop": measure_custom_loop,
                   "limit": measure_limit}[config.engine]
        with precision(config.precision):
            figures, seconds = measure(task, args, plan, config.batch_size, warm_up_steps, timed_steps)
        warm = warm_up_steps
    return {
        "task": task.name,
        "mode": "input" if config.engine == "input" else "train",
        "engine": config.engine,
        "data": config.data,
        "precision": config.precision,
        "conv_gradients": None if config.engine == "input" else args.conv_gradients,
        "replicas": config.replicas,
        "per_replica_batch_size": config.batch_size,
        "global_batch_size": config.batch_size * config.replicas,
        "repeat": repeat,
        "warm_up_steps": warm,
        "timed_steps": figures["timed_steps"],
        "images_per_sec": figures["images_per_sec"],
        "images_per_sec_std": figures["images_per_sec_std"],
        "images_per_sec_median": figures["images_per_sec_median"],
        "images_per_sec_span": figures["images_per_sec_span"],
        "step_time_mean": figures["step_time_mean"],
        "cpu_seconds_per_image": figures["cpu_seconds_per_image"],
        "span_unix_start": figures["span_unix"][0],
        "span_unix_end": figures["span_unix"][1],
        "total_seconds": seconds,
        # Derived: one epoch of the published training set at the measured rate (when there is one).
        "epoch_seconds": (task.full_train_examples / figures["images_per_sec"]
                          if config.engine != "input" and task.full_train_examples else None),
        "devices": " ".join(plan.devices),
        "tensorflow_version": tf.__version__,
        "host_cpus": os.cpu_count(),
    }
