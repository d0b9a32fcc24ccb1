"""Time to accuracy (MLPerf's measure): each configuration trains the job as its run loop does, on real
data with a validation split, until validation accuracy first reaches a target, or its budget ends.

The run loop's own machinery does the work: pipeline.run_setup.prepare (data, validation split, steps,
learning-rate schedule), its Estimator (mirrored evaluation over the replicas), its training hooks, and
its ValidationListener with --stop-at-accuracy set to the target. What the time covers, from just
before the configuration's Keras model is built to the end of the evaluation that first reaches the
target: model_to_estimator, graph building and session start, every training step, checkpoint writes
and every evaluation (its graph, the restore, the whole validation split: MLPerf counts evaluation
too). Not covered: preparing the data (the TFRecord shards, converted once and then cached) and
importing TensorFlow. The best checkpoint is kept as the run loop keeps it; no SavedModel is exported.
"""
import os
import tempfile
import time

import tensorflow as tf

from benchmark.sweep import SWEEP_SETS
from hooks.loss_watch import DivergenceError
from models.optimizers import precision
from pipeline import estimator as estimator_lib, model_dir as model_dir_lib
from pipeline.errors import UsageError
from pipeline.machine import resolved_conv_gradients
from pipeline.run_setup import prepare
from pipeline.settings import settings_of
from pipeline.training_hooks import build_training_hooks, stop_hook
from pipeline.validation.best import BestKeeper
from pipeline.validation.cadence import Pacing, cadence_for
from pipeline.validation.early_stopping import EarlyStopping
from pipeline.validation.listener import ValidationListener


class TimedValidation(ValidationListener):
    """The run loop's ValidationListener, noting in each evaluation's record when it ended: `seconds`
    since `started` (a time.perf_counter() value)."""

    def __init__(self, *args, started, **kwargs):
        super().__init__(*args, **kwargs)
        self.started = started

    def evaluate(self, step):
        stop = super().evaluate(step)
        self.record["evaluations"][-1]["seconds"] = time.perf_counter() - self.started
        return stop


def exact_cadence(settings, setup):
    """Returns the validation Cadence of --eval-every-steps or --eval-every-epochs, and every epoch
    without either: a fixed cadence, never the run loop's auto one, whose evaluations wait on the
    clock and would make the steps to accuracy depend on the machine's load."""
    if not settings.eval_every_steps and not settings.eval_every_epochs:
        settings = settings.replace(eval_every_epochs=1.0)
    return cadence_for(settings, setup.steps, setup.data.num_train_examples)


def measure_time_to_accuracy(task, task_args, plan, config, target, seed, time_budget=None):
    """Trains `config` (a benchmark.sweep.Config) with `seed` until validation accuracy reaches `target`
    or the budget ends (the job's --epochs/--max-steps; `time_budget` seconds, if given); returns the
    measurement's fields (see benchmark.accuracy_report.COLUMNS)."""
    load_at_start = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as model_dir, precision(config.precision):
        settings = resolved_conv_gradients(settings_of(task_args).replace(  # the sweep's batch and rate, as in sweep.py
            synthetic=False, explicit_flags=SWEEP_SETS, batch_size=config.batch_size, precision=config.precision,
            seed=seed, stop_at_accuracy=target, patience=None, eval_only=False, model_dir=model_dir))
        setup = prepare(task, settings, None, plan)
        if setup.data.validation_input_fn is None:
            raise UsageError("--target-accuracy needs a validation split, and this data has none: give "
                             "--validation-fraction above 0 (or --validation-dir)")
        cadence = exact_cadence(settings, setup)
        started = time.perf_counter()

        def over_budget():
            return time_budget is not None and time.perf_counter() - started > time_budget
        pacing = Pacing(cadence, setup.max_steps)
        estimator, _ = estimator_lib.build_estimator(setup, pacing, figures=False, saves_when_due=True)
        validation = TimedValidation(estimator, setup.data.validation_input_fn, pacing, model_dir, 0,
                                     BestKeeper(model_dir), EarlyStopping(stop_at_accuracy=target),
                                     stop_requested=over_budget, started=started)
        hooks = build_training_hooks(setup, stop_hook(over_budget), validation).adding(listeners=[validation])
        diverged = _train(setup, estimator, hooks)
        train_seconds = time.perf_counter() - started
        final_step = model_dir_lib.latest_global_step(model_dir)
    return {**_outcome(setup, validation, hooks, target, diverged), "validation_seconds": validation.seconds,
            "final_step": final_step, "budget_steps": setup.max_steps, "time_budget_seconds": time_budget,
            "train_seconds": train_seconds, "images_per_sec": (hooks.throughput() or {}).get("images_per_sec"),
            "cpu_seconds_per_image": (hooks.throughput() or {}).get("cpu_seconds_per_image"), "seed": seed,
            "conv_gradients": settings.conv_gradients,
            "learning_rate": setup.learning_rate, "train_examples": setup.data.num_train_examples,
            "validation_examples": setup.data.num_validation_examples, "evaluation_cadence": cadence.describe(),
            "load_average_at_start": load_at_start, "load_average_at_end": os.getloadavg()[0],
            "evaluations": [{"step": e["step"], "seconds": e["seconds"], "validation_accuracy":
                             e["validation_accuracy"], "validation_loss": e["validation_loss"]}
                            for e in validation.record["evaluations"]]}


def _train(setup, estimator, hooks):
    """Trains to the budget's final step; returns whether the loss diverged."""
    try:
        estimator.train(setup.data.train_input_fn, hooks=list(hooks.all), max_steps=setup.max_steps,
                        saving_listeners=list(hooks.listeners))
    except DivergenceError:
        return True
    return False


def _outcome(setup, validation, hooks, target, diverged):
    """Returns the measurement's fields on reaching `target`: whether, why it stopped, and when."""
    evaluations = validation.record["evaluations"]
    reaching = next((i for i, e in enumerate(evaluations) if e["validation_accuracy"] >= target), None)
    stopped_because = ("target_accuracy" if reaching is not None else "diverged" if diverged
                       else "time_budget" if hooks.stop.stopped_at_step is not None else "max_steps")
    reached = evaluations[reaching] if reaching is not None else None
    images = reached["step"] * setup.global_batch if reached else None
    return {
        "target_accuracy": target, "reached": reached is not None, "stopped_because": stopped_because,
        "seconds_to_accuracy": reached["seconds"] if reached else None,
        "steps_to_accuracy": reached["step"] if reached else None, "images_to_accuracy": images,
        "epochs_to_accuracy": images / setup.data.num_train_examples if reached else None,
        "evaluations_to_accuracy": reaching + 1 if reached else None,
        "best_validation_accuracy": max((e["validation_accuracy"] for e in evaluations), default=None)}


def run_sweep(task, task_args, configs, plans, repeats, target, time_budget=None, log=print, rows=None):
    """Measures every configuration's time to `target` `repeats` times, interleaved; repeat r of every
    configuration trains with seed (--seed or 0) + r, so that configurations compare on the same seeds.
    Returns one row dict per measurement, appended to `rows` (when given) as each is made (see
    benchmark.sweep.run_sweep)."""
    rows, total = ([] if rows is None else rows), len(configs) * repeats
    for repeat in range(repeats):
        for config in configs:
            plan = plans[config.replicas]
            seed = (task_args.seed or 0) + repeat
            row = {"task": task.name, "mode": "time_to_accuracy", "engine": config.engine, "data": config.data,
                   "precision": config.precision, "replicas": config.replicas,
                   "per_replica_batch_size": config.batch_size, "global_batch_size": config.batch_size * plan.replicas,
                   "repeat": repeat}
            row.update(measure_time_to_accuracy(task, task_args, plan, config, target, seed, time_budget))
            row.update({"devices": " ".join(plan.devices), "tensorflow_version": tf.__version__,
                        "host_cpus": os.cpu_count()})
            rows.append(row)
            outcome = (f"reached {target:g} in {row['seconds_to_accuracy']:.1f} s, step {row['steps_to_accuracy']}, "
                       f"{row['epochs_to_accuracy']:.1f} epochs" if row["reached"] else
                       f"NOT reached ({row['stopped_because']} at step {row['final_step']}, best validation "
                       f"accuracy {_three_places(row['best_validation_accuracy'])})")
            rate = f"{row['images_per_sec']:.0f} images/sec" if row["images_per_sec"] else "no images/sec"
            log(f"[{len(rows)}/{total}] {config.engine} {config.precision} {config.data} replicas {config.replicas} "
                f"batch {config.batch_size}/replica seed {seed}: {outcome}; {rate}, "
                f"{row['validation_seconds']:.1f} s evaluating, load {row['load_average_at_start']:.1f}")
    return rows


def _three_places(value):
    return "none (no evaluation)" if value is None else f"{value:.3f}"
