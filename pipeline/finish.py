"""A run's finish, one step in this order: the test evaluation of the chosen model, its export (and
the exports for devices, --tflite), results.json (and TensorBoard's hparams) and the printed summary. The one machine and a cluster's
chief finish; nothing else does."""
import datetime
import logging
import os

import tensorflow as tf

from acquisition import faults, storage
from pipeline import ema as ema_lib, evaluation_report, initial_weights, mfu as mfu_lib, mixing, model_dir as model_dir_lib, \
    results as results_lib, training_record, tta
from pipeline.errors import UsageError
from pipeline.run_output import print_report_headline, print_summary, reader_may_leave
from pipeline.validation.best import BEST_EXPORT_DIR
from pipeline.machine import describe_cpu
from pipeline.metrics import CROSS_ENTROPY
from reporting import hparams
from serving.export import export_model, is_whole
from serving.predict import resolve_export_dir
from serving.tflite import convert_and_evaluate

log = logging.getLogger(__name__)


def _why_untimed(args, steps_run):
    if "examples_per_second" not in args.hooks:
        return "--hooks leaves out examples_per_second, the hook that times the steps"
    return (f"{steps_run} steps ran, and the first {args.warm_up_steps} (--warm-up-steps) are never timed; a figure "
            f"needs at least {args.warm_up_steps + 1} steps in one run (--max-steps or --epochs), or a lower "
            "--warm-up-steps")


def _check_readable(best_checkpoint, model_dir):
    """Raises UsageError when the best checkpoint validation.json names cannot be read back whole."""
    problem = model_dir_lib.checkpoint_problem(best_checkpoint)
    if problem:
        raise UsageError(f"the best checkpoint validation kept, {best_checkpoint}, cannot be read ({problem}); "
                         f"restore {os.path.dirname(best_checkpoint)} from a copy (or pass another --model-dir), then "
                         f"run the same command: {model_dir}'s training is kept")


def finish(setup, estimator, hooks, figures, train_seconds, validation=None, extra_fields=None):
    """Ends a run, in this order: evaluates the chosen model on the test split (the best checkpoint
    `validation`, a ValidationListener, recorded; else the last), exports it (the best is exported
    already), writes results.json (with `extra_fields`) and prints the summary; returns results.json's
    dict. `figures` is (model FLOPs per image, the peak)."""
    args, data = setup.settings, setup.data
    throughput = hooks.throughput()
    steps_run = 0 if args.eval_only else model_dir_lib.latest_global_step(args.model_dir) - setup.start_step
    if throughput is None and steps_run > 0:  # the steps this run trained: fewer than planned after an early stop
        log.warning("no throughput measured: %s", _why_untimed(args, steps_run))
    best = validation.record["best"] if validation else None
    if best and best["step"] <= setup.start_step:  # kept by an earlier run (one this run copied is whole)
        _check_readable(best["checkpoint"], args.model_dir)
    log.info("evaluating on %d %s test images%s", data.num_eval_examples, data.source,
             f" with the best checkpoint, of step {best['step']}" if best else "")
    faults.point("test_evaluation")
    views = getattr(args, "tta", ())  # --tta: the probabilities averaged over these views (pipeline.tta)
    evaluation, scores, view_figures = tta.evaluate(estimator, data.eval_input_fn, views, best and best["checkpoint"])
    # The checkpoint's own step. Under asynchronous parameter_server training a checkpoint named
    # model.ckpt-122 can hold global step 123 (a worker stepped while it was saved).
    eval_step = best["step"] if best else int(evaluation["global_step"])
    results = _results(setup, hooks, figures, train_seconds, throughput, evaluation, eval_step)
    if args.ema:  # the final step's averaged and raw weights, side by side (one view each)
        results.ema = ema_lib.compare(estimator, data.eval_input_fn, estimator.latest_checkpoint(),
                                      evaluation if eval_step == results.global_step and not views else None)
    if validation:
        results.validation_examples = data.num_validation_examples
        results.evaluations = [dict(e) for e in validation.record["evaluations"]]
        results.best = {k: best[k] for k in ("step", "validation_accuracy", "validation_loss", "export_dir")} \
            if best else None
        recorded = args.eval_only and results_lib.recorded_stop(args.model_dir, results.global_step)
        results.stopped_because = recorded or validation.stopped_because or "max_steps"
        results.early_stopping = validation.early_stopping.as_dict()
        results.validation_seconds = round(validation.seconds, 3)
    if args.eval_only and not (validation and validation.stopped_because):
        _unless_training_ended(results, setup)
    extra = results.extra
    extra.update(extra_fields or {})
    extra.update(tta.results_fields(views, view_figures))
    if data.serving_input_fn:
        extra["export_dir"] = _export_dir(setup, estimator, best, eval_step)
    if data.class_names and data.source != "synthetic":  # a report on one random batch means nothing
        extra.update(evaluation_report.write_report(setup.task, args, data, scores, results.eval_step,
                                                    extra.get("export_dir"), estimator, best and best["checkpoint"]))
    if extra.get("export_dir") and not args.eval_only:
        extra["export_dir"] = _served_export(setup, estimator, extra["export_dir"], best)
    if args.tflite and extra.get("export_dir"):  # the served export (calibrated, if asked), for devices
        # int8 calibrates on the first training images of the stream, wherever a resumed run's input starts
        calibration_input = data.train_input_at(0) if data.train_input_at else data.train_input_fn
        extra["tflite"] = convert_and_evaluate(extra["export_dir"], calibration_input, data.eval_input_fn,
                                               args.tflite, args.tflite_tolerance, describe_cpu())
    extra.update(data.report)
    extra["finished_at"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    if args.eval_only:  # the training run's results.json stays as it was
        path = "(not written: --eval-only)"
    else:
        path = results_lib.write_results(args.model_dir, results)
        hparams.write_hparams(args.model_dir, results.as_dict())  # after results.json: a failure here loses no figure
    written = results.as_dict()
    with reader_may_leave(path):
        print_summary(written, path)
        print_report_headline(written, evaluation_report.report_dir(args))
    return written


def _unless_training_ended(results, setup):
    """Marks `results` of an --eval-only run `stopped_because` 'unfinished', with the training's planned
    `max_steps`, when its training stopped short of them (a stop signal, a kill) with no report of its own."""
    planned = training_record.planned_end(setup.record.segments, results.global_step)
    if planned and results.global_step < planned \
            and not results_lib.recorded_stop(setup.settings.model_dir, results.global_step):
        results.stopped_because, results.max_steps = "unfinished", planned


def _export_dir(setup, estimator, best, eval_step):
    """Returns the export of the model tested: under --eval-only the one the training run recorded (its
    served export: calibrated, with --calibrate); else the best's, made when it was found (unless it has
    been removed since); else a new export of the tested checkpoint."""
    settings, data = setup.settings, setup.data
    recorded = settings.eval_only and results_lib.recorded_export(settings.model_dir, eval_step)
    if recorded:
        return recorded
    if best and best.get("export_dir"):
        if is_whole(best["export_dir"]):
            return best["export_dir"]
        log.warning("the best model's export, %s, is gone: the best checkpoint (step %d) is exported again",
                    best["export_dir"], best["step"])
    return export_model(estimator, data.serving_input_fn, data.class_names,
                        storage.join(settings.model_dir, BEST_EXPORT_DIR), best and best["checkpoint"])


def _served_export(setup, estimator, export_dir, best):
    """Returns `export_dir` when it is the export predict.py serves from the model dir, its newest; else (a newer
    one shadows it: an earlier finish's calibrated export, when this finish calibrates nothing) a new export of
    the tested checkpoint, newest in its turn, which results.json then names."""
    settings, data = setup.settings, setup.data
    if storage.same_folder(resolve_export_dir(settings.model_dir), export_dir):
        return export_dir
    log.info("exported the tested checkpoint again: a newer export than %s would be served from the model dir",
             export_dir)
    return export_model(estimator, data.serving_input_fn, data.class_names,
                        storage.join(settings.model_dir, BEST_EXPORT_DIR), best and best["checkpoint"])


def _results(setup, hooks, figures, train_seconds, throughput, evaluation, eval_step):
    args, data, plan = setup.settings, setup.data, setup.plan
    model_flops, peak = figures
    step = model_dir_lib.latest_global_step(args.model_dir)
    segments = training_record.read(args.model_dir, setup.task.name).segments
    images_trained = training_record.images_at(segments, step, setup.global_batch)[0]
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
        eval_loss=float(evaluation[CROSS_ENTROPY]), tensorflow_version=tf.__version__,
        eval_step=eval_step, deterministic=args.deterministic, seed=args.seed,
        precision_requested=getattr(args, "precision_requested", args.precision),
        precision_reason=getattr(args, "precision_reason", None),
        conv_gradients=args.conv_gradients, conv_gradients_reason=args.conv_gradients_reason,
        init_from=initial_weights.started_from(segments), optimizer=args.optimizer, weight_decay=args.weight_decay,
        **mixing.results_fields(args))
