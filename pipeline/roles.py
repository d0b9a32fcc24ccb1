"""What each role of a run does, one function each, as tf.estimator's _TrainingExecutor gives each
role its method: one machine trains; in a cluster the chief, the workers and the evaluator go through
train_and_evaluate, and a parameter server only serves variables. The chief (or the one machine)
then reports: the test evaluation, the export and results.json."""
import datetime
import logging
import os
import time

import tensorflow as tf

from acquisition import faults, storage
from hooks.loss_watch import DivergenceError
from pipeline import agreed_stop, ema as ema_lib, estimator as estimator_lib, mfu as mfu_lib, \
    model_dir as model_dir_lib, progress, results as results_lib, test_report
from pipeline.errors import TrainingError
from pipeline.run_output import print_summary
from reporting import hparams
from serving.export import export_model

log = logging.getLogger(__name__)


def run_parameter_server(setup):
    """Serves the cluster's variables until it is stopped; returns None.

    A parameter server reads no data and builds no model: the Estimator's distributed runtime only
    uses the RunConfig to start its server.
    """
    args = setup.args
    config = estimator_lib.build_run_config(args.model_dir, setup.plan, args.checkpoint_steps,
                                            args.summary_steps, args.keep_checkpoints, args.seed)
    estimator = tf.estimator.Estimator(model_fn=_no_model, config=config)
    tf.estimator.train_and_evaluate(estimator, tf.estimator.TrainSpec(_no_input), tf.estimator.EvalSpec(_no_input))
    return None


def _no_model(features, labels, mode):
    raise RuntimeError("a parameter server builds no model")


def _no_input():
    raise RuntimeError("a parameter server reads no data")


def train_on_one_machine(setup, estimator, hooks):
    """Trains to the planned final step (nothing when it is reached already)."""
    if setup.start_step < setup.max_steps:
        estimator.train(setup.data.train_input_fn, hooks=hooks.all, max_steps=setup.max_steps,
                        saving_listeners=hooks.listeners)


def run_in_cluster(setup, estimator, hooks):
    """Runs this task's role of the cluster (chief, worker or evaluator) through train_and_evaluate:
    the chief and the workers train (the chief validating between its steps, when `hooks` say so:
    pipeline.agreed_stop), the evaluator evaluates each new checkpoint on the validation split
    (TensorBoard's eval_validation), or the test split when there is none, until training ends."""
    data = setup.data
    evaluated = (data.validation_input_fn, "validation") if data.validation_input_fn else (data.eval_input_fn, None)
    train_spec = tf.estimator.TrainSpec(data.train_input_fn, max_steps=setup.max_steps, hooks=hooks.all,
                                        saving_listeners=hooks.listeners)
    eval_spec = tf.estimator.EvalSpec(evaluated[0], steps=None, name=evaluated[1], start_delay_secs=0,
                                      throttle_secs=setup.args.eval_throttle_secs)
    if setup.cluster.task_type == "evaluator":
        # What train_and_evaluate runs on an evaluator, with a listener that also ends it after the
        # final checkpoint of an early stop (it would otherwise wait for --max-steps' for ever).
        agreed_stop.evaluate_until_training_ends(estimator, train_spec, eval_spec, setup.args.model_dir)
        return
    tf.estimator.train_and_evaluate(estimator, train_spec, eval_spec)


def train(setup, estimator, hooks, stop):
    """Trains as this process's role says; returns the seconds spent. Raises TrainingError when the
    loss diverges (with the diverged checkpoint set aside)."""
    args, train_start = setup.args, time.perf_counter()
    with stop.training():
        try:
            if setup.cluster is not None:
                run_in_cluster(setup, estimator, hooks)
            else:
                train_on_one_machine(setup, estimator, hooks)
        except DivergenceError as e:
            if setup.chief:  # the saver runs before the loss check: it may have saved diverged weights
                model_dir_lib.set_aside_diverged(args.model_dir, e.step)
            raise TrainingError(
                f"{e}: the learning rate is likely too high. Lower --learning-rate (or the batch) and run again "
                f"to resume from the last good checkpoint, {_describe_checkpoint(args.model_dir)}, or start "
                "afresh with another --model-dir") from None
    return time.perf_counter() - train_start


def _describe_checkpoint(model_dir):
    checkpoint = tf.train.latest_checkpoint(model_dir)
    return os.path.basename(checkpoint) if checkpoint else "none yet (the run starts from scratch)"


def _why_untimed(args, steps_run):
    if "examples_per_second" not in args.hooks:
        return "--hooks leaves out examples_per_second, the hook that times the steps"
    return (f"{steps_run} steps ran, and the first {args.warm_up_steps} (--warm-up-steps) are never timed; a figure "
            f"needs at least {args.warm_up_steps + 1} steps in one run (--max-steps or --epochs), or a lower "
            "--warm-up-steps")


def report(setup, estimator, hooks, figures, train_seconds, validation=None):
    """Evaluates the chosen model on the test split (the best checkpoint `validation`, a
    ValidationListener, recorded; else the last), exports it (the best is exported already), writes
    results.json and prints the summary; returns results.json's dict. `figures` is (model FLOPs per
    image, the peak)."""
    args, data = setup.args, setup.data
    throughput = hooks.throughput()
    if throughput is None and setup.start_step < setup.max_steps and not args.eval_only:
        log.warning("no throughput measured: %s", _why_untimed(args, setup.max_steps - setup.start_step))
    best = validation.record["best"] if validation else None
    log.info("evaluating on %d %s test images%s", data.num_eval_examples, data.source,
             f" with the best checkpoint, of step {best['step']}" if best else "")
    faults.point("test_evaluation")
    evaluation, scores = test_report.evaluate(estimator, data.eval_input_fn, best and best["checkpoint"])
    # The checkpoint's own step. Under asynchronous parameter_server training a checkpoint named
    # model.ckpt-122 can hold global step 123 (a worker stepped while it was saved).
    eval_step = best["step"] if best else int(evaluation["global_step"])
    results = _results(setup, hooks, figures, train_seconds, throughput, evaluation, eval_step)
    if getattr(args, "ema", None):  # the final step's averaged and raw weights, side by side
        results.ema = ema_lib.compare(estimator, data.eval_input_fn, estimator.latest_checkpoint(),
                                      evaluation if eval_step == results.global_step else None)
    if validation:
        results.validation_examples = data.num_validation_examples
        results.evaluations = [dict(e) for e in validation.record["evaluations"]]
        results.best = {k: best[k] for k in ("step", "validation_accuracy", "validation_loss", "export_dir")} \
            if best else None
        results.stopped_because = validation.stopped_because or "max_steps"
        results.early_stopping = validation.early_stopping
        results.validation_seconds = round(validation.seconds, 3)
    extra = results.extra
    if setup.cluster is not None:
        extra["cluster"] = {"strategy": args.strategy, "training_workers": setup.cluster.num_workers}
    if data.serving_input_fn:
        extra["export_dir"] = best["export_dir"] if best and best.get("export_dir") else \
            (args.eval_only and results_lib.recorded_export(args.model_dir, eval_step)) or export_model(
                estimator, data.serving_input_fn, data.class_names, storage.join(args.model_dir, "export"),
                best and best["checkpoint"])
    if data.class_names and data.source != "synthetic":  # a report on one random batch means nothing
        extra.update(test_report.write_report(setup.task, args, data, scores, args.model_dir, results.eval_step,
                                              extra.get("export_dir"), estimator, best and best["checkpoint"]))
    extra.update(data.report)
    extra["finished_at"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    if args.eval_only:  # the training run's results.json stays as it was
        path = "(not written: --eval-only)"
    else:
        path = results_lib.write_results(args.model_dir, results)
        hparams.write_hparams(args.model_dir, results.as_dict())  # after results.json: a failure here loses no figure
    written = results.as_dict()
    print_summary(written, path)
    test_report.print_headline(written, args.model_dir)
    return written


def _results(setup, hooks, figures, train_seconds, throughput, evaluation, eval_step):
    args, data, plan = setup.args, setup.data, setup.plan
    model_flops, peak = figures
    step = estimator_lib.latest_global_step(args.model_dir)
    images_trained = progress.images_at(progress.read(args.model_dir, setup.task.name).segments, step,
                                        setup.global_batch)[0]
    return results_lib.RunResults(
        task=setup.task.name, data_source=data.source, model_dir=storage.absolute(args.model_dir),
        global_step=step, start_global_step=setup.start_step, max_steps=setup.max_steps,
        replicas=plan.replicas, devices=plan.devices, distribution=plan.description, precision=args.precision,
        augment=[[name, value] for name, value in args.augment], xla=args.xla,
        intra_op_threads=args.intra_op_threads, inter_op_threads=args.inter_op_threads,
        per_replica_batch_size=args.batch_size, global_batch_size=setup.global_batch,
        learning_rate=hooks.rate.last, learning_rate_first_step=hooks.rate.first,
        learning_rate_base=setup.learning_rate, learning_rate_schedule=setup.schedule.get_config(),
        train_examples=data.num_train_examples, epochs_requested=None if args.max_steps else args.epochs,
        images_trained=images_trained, epochs_trained=round(images_trained / data.num_train_examples, 4),
        train_seconds=round(train_seconds, 3),
        train_images_per_sec=throughput and throughput["images_per_sec"],
        train_images_per_sec_std=throughput and throughput["images_per_sec_std"],
        train_step_time_mean=throughput and throughput["step_time_mean"],
        timed_steps=throughput["timed_steps"] if throughput else 0,
        model_flops_per_image=model_flops, peak_flops=peak.as_dict(),
        mfu=mfu_lib.mfu(throughput and throughput["images_per_sec"], model_flops["training"], peak),
        checkpoint_seconds=round(hooks.checkpoint_timer.seconds, 3),
        checkpoints_saved=hooks.checkpoint_timer.saves, loss_warnings=hooks.loss_watch.warnings,
        eval_examples=data.num_eval_examples, eval_accuracy=float(evaluation["accuracy"]),
        eval_loss=float(evaluation["loss"]), tensorflow_version=tf.__version__,
        eval_step=eval_step, deterministic=args.deterministic, seed=args.seed)
