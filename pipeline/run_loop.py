"""The one run loop every job uses: check the settings, build the Estimator and its hooks, run this
process's role (see pipeline.roles), and report."""
import contextlib
import dataclasses
import logging

import tensorflow as tf

from acquisition import storage
from models.optimizers import precision
from pipeline import agreed_stop, determinism, ema as ema_lib, estimator as estimator_lib, mfu as mfu_lib, \
    model_dir as model_dir_lib, progress, roles, validation as validation_lib
from pipeline.cluster_run import resolve_cluster, watch_cluster
from pipeline.errors import UsageError
from pipeline.logs import configure_logging
from pipeline.run_hooks import build_training_hooks
from pipeline.run_output import finished_results, print_header
from pipeline.run_setup import RunSetup, build_plan, ensure_writable_dir, prepare_run, warn_about
from pipeline.stopping import Interrupted, StopSignals
from serving.export import export_model

log = logging.getLogger(__name__)


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
            precision(args.precision), determinism.turned_on(args) as seed_defaulted:
        return _run(task, args, cluster, chief, stop, seed_defaulted)


def _run(task, args, cluster, chief, stop, seed_defaulted=False):
    ema_lib.check(args, chief)
    if chief:
        model_dir_lib.remove_leftovers(args.model_dir)
        if cluster is not None and not args.eval_only and agreed_stop.remove_stop(args.model_dir):
            log.info("removed an earlier run's stop record (%s)", agreed_stop.STOP_FILE)
    setup = RunSetup(task, args, cluster, chief, build_plan(args, cluster), seed_defaulted=seed_defaulted)
    if cluster is not None and cluster.task_type == "ps":
        watch_cluster(cluster, args, max_steps=None)
        return roles.run_parameter_server(setup)
    prepare_run(setup)
    if args.eval_only:
        if not setup.start_step:
            raise UsageError(f"--eval-only needs a trained model dir, and {args.model_dir} holds no checkpoint; "
                             "train first (without --eval-only), or pass the --model-dir of a trained run")
    elif chief and setup.start_step >= setup.max_steps:
        finished = finished_results(args.model_dir, setup.start_step, setup.max_steps)
        if finished:
            return finished
    cadence = validation_cadence(setup)
    print_header(setup, cadence)
    warn_about(setup)
    estimator, figures = build_estimator(setup, cadence)
    validation = build_validation(setup, estimator, cadence, stop.requested)
    hooks = build_training_hooks(setup, stop.requested, validation, signals=stop)
    if args.eval_only:
        return roles.report(setup, estimator, hooks, figures, 0.0, validation)
    if cluster is None and validation is not None and validation.catch_up(setup.start_step):
        # Stopped early at its newest checkpoint (now or by the run before, killed before its report).
        return finished_results(args.model_dir, setup.start_step, setup.max_steps) or \
            roles.report(setup, estimator, hooks, figures, 0.0, validation)
    if chief and setup.start_step < setup.max_steps:  # written last before training: a failure above leaves it
        progress.record_start(args.model_dir, task.name, setup.record, setup.steps, setup.trained_on)
    train_seconds = roles.train(setup, estimator, hooks, stop)
    if validation is not None and cluster is not None and not stop.requested():
        # In a cluster the Estimator calls no saving listener, so neither the listener's end(): the
        # final step's evaluation comes here, after the final checkpoint (none after an early stop).
        validation.end(None, estimator_lib.latest_global_step(args.model_dir))
    if stop.requested():
        raise Interrupted(stop.received, hooks.stop.stopped_at_step if chief else None)
    if not chief:
        log.info("%s %d finished", cluster.task_type, cluster.index)
        return None
    return roles.report(setup, estimator, hooks, figures, train_seconds, validation)


def validation_cadence(setup):
    """Returns the validation's Cadence, or None: no validation split, or the evaluator task of a
    cluster (which evaluates each new checkpoint as it comes). In a cluster every trainer knows it:
    it sets the checkpoint steps, which must be the same on every task; the chief validates."""
    if setup.data.validation_input_fn is None or (setup.cluster is not None and not setup.cluster.trains):
        return None
    return validation_lib.cadence_for(setup.args, setup)


def build_validation(setup, estimator, cadence, stop_requested):
    """Returns the ValidationListener evaluating as training goes and exporting the best (on the chief
    alone), or None."""
    if cadence is None or not setup.chief:
        return None
    args, data = setup.args, setup.data

    def export_best(checkpoint):
        return export_model(estimator, data.serving_input_fn, data.class_names,
                            storage.join(args.model_dir, validation_lib.BEST_EXPORT_DIR), checkpoint)
    return validation_lib.ValidationListener(
        estimator, data.validation_input_fn, cadence, args.model_dir, setup.start_step,
        export=export_best if data.serving_input_fn else None,
        stop_at_accuracy=args.stop_at_accuracy, patience=args.patience, min_delta=args.min_delta,
        stop_requested=stop_requested, max_steps=setup.max_steps)


def mirror_evaluation(setup):
    """Returns whether evaluations run mirrored over the replicas (a mirrored plan on one machine with
    more than one replica and no fewer evaluation examples than replicas); if so, sets `setup`'s
    evaluation inputs to batches every replica gets its share of."""
    data, replicas = setup.data, setup.plan.replicas
    sizes = [data.num_eval_examples] + ([data.num_validation_examples] if data.validation_input_fn else [])
    if setup.cluster is not None or replicas < 2 or setup.args.strategy != "mirrored" or min(sizes) < replicas:
        return False
    batch = setup.args.batch_size
    setup.data = dataclasses.replace(data, eval_input_fn=estimator_lib.replica_batched_input_fn(
        data.eval_input_fn, data.num_eval_examples, batch, replicas))
    if data.validation_input_fn:
        setup.data.validation_input_fn = estimator_lib.replica_batched_input_fn(
            data.validation_input_fn, data.num_validation_examples, batch, replicas)
    return True


def build_estimator(setup, cadence=None, figures=True):
    """Returns (the Estimator of `setup`'s model, (its FLOPs per image, the devices' peak)), the
    model checked to fit the model dir's checkpoint; without `figures`, (the Estimator, None) and
    no MFU header lines (the benchmark's time to accuracy)."""
    args = setup.args
    if args.seed is not None:
        tf.keras.utils.set_random_seed(args.seed)
    checkpoint_steps = cadence.checkpoint_steps(setup.global_batch, args.checkpoint_steps) if cadence \
        else args.checkpoint_steps  # each evaluation needs a checkpoint of its step
    mirrored = mirror_evaluation(setup)
    config = estimator_lib.build_run_config(
        args.model_dir, setup.plan, checkpoint_steps, args.summary_steps, args.keep_checkpoints, args.seed,
        estimator_lib.session_config(args.xla, args.intra_op_threads, args.inter_op_threads), mirrored)
    keras_model = setup.task.build_model(args, setup.schedule)
    run_figures = None
    if figures:
        run_figures = mfu_lib.run_figures(keras_model, args.precision, setup.plan.devices, probe=setup.chief)
        print(mfu_lib.header_lines(*run_figures), flush=True)
    model_dir_lib.check_fits(args.model_dir, keras_model)
    estimator = estimator_lib.build_estimator(keras_model, config, setup.data.class_names, args.augment,
                                              args.seed or 0, ema=getattr(args, "ema", None))
    return estimator, run_figures
