"""The one run loop every job uses: build the Estimator, train with hooks, evaluate, write results."""
import contextlib
import datetime
import logging
import os
import tempfile
import time

import tensorflow as tf

import hooks as hooks_lib
from hooks.checkpoint_timer import CheckpointTimer
from hooks.examples_per_second import ExamplesPerSecondHook
from hooks.learning_rate import LearningRateHook
from hooks.loss_watch import DivergenceError, LossWatchHook
from hooks.progress import ProgressHook
from hooks.stop import StopOnRequestHook
from models.learning_rate import ScheduledRate
from models.optimizers import precision
from pipeline import batching, estimator as estimator_lib, mfu as mfu_lib, model_dir as model_dir_lib, progress, \
    results as results_lib
from pipeline import test_report
from reporting import hparams
from pipeline.cluster_run import resolve_cluster, watch_cluster
from pipeline.distribution import build_cluster_distribution, build_distribution
from pipeline.errors import TrainingError, UsageError
from pipeline.logs import configure_logging
from pipeline.machine import precision_warning
from pipeline.stopping import Interrupted, StopSignals
from serving.export import export_model

log = logging.getLogger(__name__)


def ensure_writable_dir(path):
    """Creates `path` if needed; raises UsageError when it cannot be written to."""
    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as e:
        raise UsageError(f"cannot write to the model dir {path} ({e.strerror}); "
                         "pass --model-dir with a folder you can write to") from None


def build_plan(args, cluster):
    """Returns the DistributionPlan for `args`: one machine, or this task's part of a TF_CONFIG cluster."""
    if cluster is None:
        if args.strategy not in ("mirrored", "central_storage"):
            raise UsageError(f"--strategy {args.strategy} needs a cluster in TF_CONFIG; start one with "
                             "scripts/launch_local_cluster.py, or use --strategy mirrored")
        return build_distribution(gpus=args.gpus, cpu_replicas=args.cpu_replicas, strategy=args.strategy)
    # The Estimator's multi-worker runtime (the distribute coordinator) works in graph mode only.
    tf.compat.v1.disable_eager_execution()
    return build_cluster_distribution(args.strategy, cluster, gpus=args.gpus, cpu_replicas=args.cpu_replicas)


def run(task, args):
    """Trains and evaluates `task` as `args` say; returns the results dict also written to results.json.

    In a TF_CONFIG cluster every task trains (or evaluates, or serves variables)
    through tf.estimator.train_and_evaluate; only the chief then evaluates the
    final checkpoint and writes results.json, and the others return None.
    Raises Interrupted after a stop signal (with a checkpoint of the step
    reached) and TrainingError when the loss diverges.
    """
    configure_logging(args.verbose)
    ensure_writable_dir(args.model_dir)
    cluster = resolve_cluster(args)
    chief = cluster is None or cluster.is_chief
    with StopSignals() as stop, (model_dir_lib.locked(args.model_dir) if chief else contextlib.nullcontext()), \
            precision(args.precision):
        return _run(task, args, cluster, chief, stop)


def _run(task, args, cluster, chief, stop):
    if chief:
        model_dir_lib.remove_leftovers(args.model_dir)
    plan = build_plan(args, cluster)
    if cluster is not None and cluster.task_type == "ps":
        watch_cluster(cluster, args, max_steps=None)
        return _serve_variables(args, plan)
    record = progress.read(args.model_dir, task.name)
    data = task.prepare_data(args, args.batch_size)  # a task's recipe (TaskData.recipe) may set args' batch first
    test_report.check_positive_classes(args, data.class_names)
    global_batch = args.batch_size * plan.replicas
    learning_rate = batching.scaled_learning_rate(
        args.learning_rate, global_batch, args.reference_batch_size, args.lr_scaling)
    trained_on = progress.describe_data(data.source == "synthetic", data.num_train_examples)
    progress.check_same_data(record, trained_on, args.model_dir)
    if chief:
        model_dir_lib.restorable_checkpoint(args.model_dir)
    start_step = estimator_lib.latest_global_step(args.model_dir)
    steps = progress.plan(record.segments, start_step, global_batch, data.num_train_examples,
                          epochs=None if args.max_steps else args.epochs, max_steps=args.max_steps)
    max_steps = steps.max_steps
    if chief and start_step >= max_steps:
        finished = _finished_results(args.model_dir, start_step, max_steps)
        if finished:
            return finished
    schedule = ScheduledRate(learning_rate, steps.images_at_end, args.lr_schedule,
                             round(args.warm_up_epochs * data.num_train_examples), images_per_step=global_batch,
                             start_step=start_step, images_at_start=steps.images_at_start)
    _print_header(task, args, plan, data, global_batch, schedule, steps)
    if steps.assumed:
        log.warning("%s keeps no record of the images trained before step %d (a run of an earlier version): "
                    "counted as %d steps of this run's %d-image global batch", args.model_dir, start_step,
                    start_step, global_batch)
    warning = precision_warning(args.precision, plan.devices[0].startswith("/gpu"))
    if warning:
        log.warning(warning)

    if args.seed is not None:
        tf.keras.utils.set_random_seed(args.seed)
    config = estimator_lib.build_run_config(
        args.model_dir, plan, args.checkpoint_steps, args.summary_steps, args.keep_checkpoints, args.seed,
        estimator_lib.session_config(args.xla, args.intra_op_threads, args.inter_op_threads))
    keras_model = task.build_model(args, schedule)
    model_flops, peak = mfu_lib.run_figures(keras_model, args.precision, plan.devices, probe=chief)
    print(mfu_lib.header_lines(model_flops, peak), flush=True)
    model_dir_lib.check_fits(args.model_dir, keras_model)
    estimator = estimator_lib.build_estimator(keras_model, config, data.class_names, args.augment,
                                              args.seed or 0)
    stop_hook, loss_watch = StopOnRequestHook(stop.requested), LossWatchHook(args.log_steps)
    rate_hook = LearningRateHook(args.model_dir if chief else None, args.summary_steps)
    # The checkpoint timer measures each write of the Estimator's checkpoint saver, which
    # runs before every hook here: the throughput hook leaves that time out of its steps.
    checkpoint_timer = CheckpointTimer()
    train_hooks = [stop_hook] + hooks_lib.build_hooks(
        args.hooks, global_batch_size=global_batch, model_dir=args.model_dir, every_n_steps=args.summary_steps,
        warm_up_steps=args.warm_up_steps, profile_steps=args.log_steps, excluded_time=checkpoint_timer) \
        + [loss_watch, rate_hook, ProgressHook(max_steps, global_batch, args.log_steps)]

    train_hooks += watch_cluster(cluster, args, max_steps)

    if chief and start_step < max_steps:  # written last before training: a failure above leaves it as it was
        progress.record_start(args.model_dir, task.name, record, steps, trained_on)
    train_start = time.perf_counter()
    with stop.training():
        try:
            if cluster is not None:
                tf.estimator.train_and_evaluate(
                    estimator,
                    tf.estimator.TrainSpec(data.train_input_fn, max_steps=max_steps, hooks=train_hooks,
                                           saving_listeners=[checkpoint_timer]),
                    tf.estimator.EvalSpec(data.eval_input_fn, steps=None, start_delay_secs=0,
                                          throttle_secs=args.eval_throttle_secs))
            elif start_step < max_steps:
                estimator.train(data.train_input_fn, hooks=train_hooks, max_steps=max_steps,
                                saving_listeners=[checkpoint_timer])
        except DivergenceError as e:
            if chief:  # the saver runs before the loss check: it may have saved diverged weights
                model_dir_lib.set_aside_diverged(args.model_dir, e.step)
            raise TrainingError(
                f"{e}: the learning rate is likely too high. Lower --learning-rate (or the batch) and run again "
                f"to resume from the last good checkpoint, {_describe_checkpoint(args.model_dir)}, or start afresh "
                "with another --model-dir") from None
    if stop.requested():
        raise Interrupted(stop.received, stop_hook.stopped_at_step if chief else None)
    if not chief:
        log.info("%s %d finished", cluster.task_type, cluster.index)
        return None
    train_seconds = time.perf_counter() - train_start
    throughput = _throughput(train_hooks)
    if throughput is None and start_step < max_steps:
        log.warning("no throughput measured: %s", _why_untimed(args, max_steps - start_step))

    log.info("evaluating on %d %s test images", data.num_eval_examples, data.source)
    evaluation, scores = test_report.evaluate(estimator, data.eval_input_fn)

    images_trained = progress.images_at(progress.read(args.model_dir, task.name).segments,
                                        int(evaluation["global_step"]), global_batch)[0]
    results = {
        "task": task.name,
        "data_source": data.source,
        "model_dir": os.path.abspath(args.model_dir),
        "global_step": int(evaluation["global_step"]),
        "start_global_step": start_step,
        "max_steps": max_steps,
        "replicas": plan.replicas,
        "devices": plan.devices,
        "distribution": plan.description,
        "precision": args.precision,
        "augment": [[name, value] for name, value in args.augment],
        "xla": args.xla,
        "intra_op_threads": args.intra_op_threads,
        "inter_op_threads": args.inter_op_threads,
        "per_replica_batch_size": args.batch_size,
        "global_batch_size": global_batch,
        # The rate the optimizer applied at this run's last step, read back from the graph.
        "learning_rate": rate_hook.last,
        "learning_rate_first_step": rate_hook.first,
        "learning_rate_base": learning_rate,
        "learning_rate_schedule": schedule.get_config(),
        "train_examples": data.num_train_examples,
        "epochs_requested": None if args.max_steps else args.epochs,
        "images_trained": images_trained,
        "epochs_trained": round(images_trained / data.num_train_examples, 4),
        "train_seconds": round(train_seconds, 3),
        "train_images_per_sec": throughput and throughput["images_per_sec"],
        "train_images_per_sec_std": throughput and throughput["images_per_sec_std"],
        "train_step_time_mean": throughput and throughput["step_time_mean"],
        "timed_steps": throughput["timed_steps"] if throughput else 0,
        "model_flops_per_image": model_flops,
        "peak_flops": peak.as_dict(),
        "mfu": mfu_lib.mfu(throughput and throughput["images_per_sec"], model_flops["training"], peak),
        "checkpoint_seconds": round(checkpoint_timer.seconds, 3),
        "checkpoints_saved": checkpoint_timer.saves,
        "loss_warnings": loss_watch.warnings,
        "eval_examples": data.num_eval_examples,
        "eval_accuracy": float(evaluation["accuracy"]),
        "eval_loss": float(evaluation["loss"]),
        "tensorflow_version": tf.__version__,
    }
    if cluster is not None:
        results["cluster"] = {"strategy": args.strategy, "training_workers": cluster.num_workers}
    if data.serving_input_fn:
        results["export_dir"] = export_model(estimator, data.serving_input_fn, data.class_names,
                                             os.path.join(args.model_dir, "export"))
    if data.class_names and data.source != "synthetic":  # a report on one random batch means nothing
        results.update(test_report.write_report(task, args, data, scores, args.model_dir, results["global_step"],
                                                results.get("export_dir")))
    results.update(data.report)
    results["finished_at"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    path = results_lib.write_results(args.model_dir, results)
    hparams.write_hparams(args.model_dir, results)  # after results.json: a failure here loses no figure
    _print_summary(results, path)
    test_report.print_headline(results, args.model_dir)
    return results


def _serve_variables(args, plan):
    """Runs this parameter server for the cluster, until it is stopped; returns None.

    A parameter server holds the variables the workers train, so it reads no data and builds no
    model: the Estimator's distributed runtime only uses the RunConfig to start its server.
    """
    config = estimator_lib.build_run_config(args.model_dir, plan, args.checkpoint_steps, args.summary_steps,
                                            args.keep_checkpoints, args.seed)
    estimator = tf.estimator.Estimator(model_fn=_no_model, config=config)
    tf.estimator.train_and_evaluate(estimator, tf.estimator.TrainSpec(_no_input), tf.estimator.EvalSpec(_no_input))
    return None


def _no_model(features, labels, mode):
    raise RuntimeError("a parameter server builds no model")


def _no_input():
    raise RuntimeError("a parameter server reads no data")


def _finished_results(model_dir, step, max_steps):
    """Returns the results of the run that finished at `step` in `model_dir` (re-printed), or None."""
    try:
        results = results_lib.read_results(model_dir)
    except (OSError, ValueError):
        return None
    if results.get("global_step") != step:
        return None
    past = f", past the final step {max_steps} these flags ask for (training cannot go back)" if step > max_steps else ""
    print(f"{results['task']}: already finished at global step {step} (on {results.get('finished_at')}){past}; "
          "nothing to do. Its results:", flush=True)
    _print_summary(results, os.path.join(model_dir, results_lib.RESULTS_FILE))
    return results


def _describe_checkpoint(model_dir):
    checkpoint = tf.train.latest_checkpoint(model_dir)
    return os.path.basename(checkpoint) if checkpoint else "none yet (the run starts from scratch)"


def _why_untimed(args, steps_run):
    if "examples_per_second" not in args.hooks:
        return "--hooks leaves out examples_per_second, the hook that times the steps"
    return (f"{steps_run} steps ran, and the first {args.warm_up_steps} (--warm-up-steps) are never timed; a figure "
            f"needs at least {args.warm_up_steps + 1} steps in one run (--max-steps or --epochs), or a lower "
            "--warm-up-steps")


def _throughput(train_hooks):
    for hook in train_hooks:
        if isinstance(hook, ExamplesPerSecondHook):
            return hook.summary()
    return None


def _print_header(task, args, plan, data, global_batch, schedule, steps):
    scaling = (f"{args.learning_rate:g} x {global_batch}/{args.reference_batch_size}, linear scaling"
               if args.lr_scaling == "linear" else "not scaled with the batch")
    resume = (f"resuming from step {steps.start_step}" if steps.start_step else "starting from scratch")
    print(f"{task.name}: {data.source} data, {data.num_train_examples} training / "
          f"{data.num_eval_examples} test images\n"
          f"  devices:       {plan.description}\n"
          f"  batch:         {args.batch_size} per replica x {plan.replicas} replica(s) = {global_batch} global\n"
          f"  precision:     {_describe_precision(args)}\n"
          f"{_describe_augment(args)}"
          f"  learning rate: {schedule.base_rate:g} ({scaling}), {schedule.describe()}\n"
          f"  steps:         to global step {steps.max_steps}, {resume}\n"
          f"  images:        {_describe_images(steps, data.num_train_examples)}\n"
          f"  model dir:     {args.model_dir}"
          + (f"\n  recipe:        {data.recipe}" if data.recipe else ""), flush=True)


def _describe_images(steps, num_train_examples):
    def epochs(images):
        return f"{images / num_train_examples:.3g} epochs"
    left = steps.images_at_end - steps.images_at_start
    in_steps = f"in {steps.max_steps - steps.start_step} steps of {steps.global_batch}"
    if not steps.start_step:
        return f"{left:,} ({epochs(left)} of {num_train_examples:,}) {in_steps}"
    target = (f" of the {steps.target_images:,} asked ({epochs(steps.target_images)})"
              if steps.target_images is not None else "")
    return (f"{steps.images_at_start:,} trained ({epochs(steps.images_at_start)}); {left:,} to train "
            f"({epochs(left)}) {in_steps}{target}")


def _describe_augment(args):
    if not args.augment:
        return ""
    transforms = ", ".join(f"{name}={value:g}" if isinstance(value, float) else f"{name}={value}"
                           for name, value in args.augment)
    return (f"  augment:       {transforms} (training batches only, drawn from seed {args.seed or 0}, the step "
            "and the replica)\n")


def _describe_precision(args):
    described = {"fp32": "fp32", "bf16": "bf16 (float32 variables, bfloat16 math, float32 softmax and loss)",
                 "fp16": "fp16 (float32 variables, float16 math, dynamic loss scaling)"}[args.precision]
    extras = (["XLA"] if args.xla else []) + [f"{n} {kind}-op threads" for kind, n in
                                              (("intra", args.intra_op_threads), ("inter", args.inter_op_threads)) if n]
    return described + (f"; {', '.join(extras)}" if extras else "")


def _print_summary(results, path):
    if results["train_images_per_sec"] is not None:
        train = (f"{results['train_images_per_sec']:.1f} images/sec "
                 f"(+/- {results['train_images_per_sec_std']:.1f}) over {results['timed_steps']} timed steps, "
                 f"{results['train_seconds']:.1f} s in train()" + mfu_lib.describe_mfu(results))
    else:
        train = "no steps timed in this run"
    trained = (f"  images:  {results['images_trained']:,} trained, {results['epochs_trained']:g} epochs\n"
               if "images_trained" in results else "")
    print(f"{results['task']}: finished at global step {results['global_step']}\n"
          f"  train:   {train}\n{trained}"
          f"  eval:    accuracy {results['eval_accuracy']:.4f}, loss {results['eval_loss']:.4f} "
          f"on {results['eval_examples']} test images", flush=True)
    width = max(map(len, results.get("per_class", {})), default=8)
    for name, figures in results.get("per_class", {}).items():
        precision, recall = (f"{v:.3f}" if v is not None else "n/a"
                             for v in (figures["precision"], figures["recall"]))
        print(f"           {name:{width}s} precision {precision}  recall {recall}  ({figures['support']} images)")
    if results.get("skipped_files"):
        print(f"  skipped: {len(results['skipped_files'])} files that cannot be decoded "
              "(listed with their problems in results.json)")
    if results.get("export_dir"):
        print(f"  export:  {results['export_dir']}")
    print(f"  results: {path}", flush=True)
