"""Who does what in a run, chosen once. run() fixes the settings, finds this process's place (one
machine, or a task of a TF_CONFIG cluster) and calls one role, as tf.estimator's _TrainingExecutor
gives each cluster role its method: run_local, run_chief, run_worker, run_evaluator or run_ps. Each
reads top to bottom; below them no code asks which role it runs in. The one machine and the chief
end with pipeline.finish: the test evaluation, the export, results.json and the summary."""
import logging
import time

import tensorflow as tf

from acquisition import storage
from cluster.peers import lost_peer_line
from hooks.loss_watch import DivergenceError
from hooks.stop import BetweenStepsHook, StopAtAgreedStepHook
from models.optimizers import precision
from pipeline import determinism, ema as ema_lib, evaluation_report, initial_weights, model_dir as model_dir_lib, \
    training_record, undecodable
from pipeline.cluster_run import WORKER_READY_RECHECK_SECS, finished_check, recheck_model_readiness_every, \
    resolve_cluster, wait_for_chief_checkpoint, wait_for_final_checkpoint, watch_evaluator, watch_parameter_server, \
    watch_trainer
from pipeline.errors import FlagError, PeerLostError, TrainingError, UsageError
from pipeline.estimator import build_estimator, build_run_config
from pipeline.finish import finish
from pipeline.logs import configure_logging
from pipeline.machine import resolved_conv_gradients, resolved_precision
from pipeline.run_output import finished_results, print_header
from pipeline.run_setup import cluster_plan, ensure_writable_dir, local_plan, prepare, stopped_early_at_start, \
    warn_about
from pipeline.settings import Settings
from pipeline.signals import Interrupted, StopSignals
from pipeline.training_hooks import build_training_hooks, stop_hook
from pipeline.validation import agreed_stop
from pipeline.validation.best import BEST_EXPORT_DIR
from pipeline.validation.cadence import Pacing, cadence_for
from pipeline.validation.early_stopping import early_stopping_of
from pipeline.validation.listener import build_validation
from pipeline.validation.record import read_record
from reporting import hparams
from serving.export import export_model

log = logging.getLogger(__name__)


def run(task, args):
    """Trains and evaluates `task` as the parsed command line `args` says; returns the results dict
    also written to results.json (None from a cluster task that is not the chief).

    Raises Interrupted after a stop signal (with a checkpoint of the step reached),
    TrainingError when the loss diverges, FlagError and UsageError for settings that
    cannot work.
    """
    configure_logging(args.verbose)
    settings = Settings.from_args(args)
    task.check(settings)
    cluster = resolve_cluster(settings)
    settings = resolved_precision(settings, in_cluster=cluster is not None)  # refused before any folder is made
    settings = resolved_conv_gradients(settings)
    made_model_dir = ensure_writable_dir(settings.model_dir)
    with model_dir_lib.removed_if_left_empty(settings.model_dir, made_model_dir):
        if cluster is not None and settings.eval_only:
            raise FlagError("--eval-only evaluates a trained model dir on one machine; run it without a cluster "
                            "(no TF_CONFIG, no --cluster slurm)")
        role = ROLES[cluster.task_type] if cluster is not None else run_local
        ema_lib.check(settings, role in (run_local, run_chief))  # the roles that write the model dir read it

        def attempt():
            with StopSignals() as stop, precision(settings.precision), determinism.turned_on(settings):
                return role(task, settings, cluster, stop)
        # (A cluster task fails instead, its peers with it, and the relaunch its scheduler makes leaves them out.)
        return undecodable.resumed_without_undecodable(attempt, settings) if cluster is None else attempt()


def run_local(task, settings, cluster, stop):
    """One machine: trains (validating as it goes), then finishes; returns results.json's dict."""
    with model_dir_lib.locked(settings.model_dir):
        model_dir_lib.remove_leftovers(settings.model_dir)
        setup = prepare(task, settings, None, local_plan(settings), check_checkpoint=True, reprints_early_stop=True)
        finished = _already_finished(setup) or _finished_early(setup)
        if finished:
            return finished
        pacing = _pacing(setup)
        _announce(setup, pacing)
        estimator, figures = build_estimator(setup, pacing, saves_when_due=True, trains=not settings.eval_only)
        validation = _validation(setup, estimator, pacing, stop)
        hooks = build_training_hooks(setup, stop_hook(stop.requested, stop), validation).adding(
            listeners=[validation] if validation else [])
        if settings.eval_only:
            return finish(setup, estimator, hooks, figures, 0.0, validation)
        if validation is not None and validation.catch_up(setup.start_step):
            # Stopped early at its newest checkpoint: now, by the run before (killed before its report, or
            # whose report says so) or under this run's stricter rule (a new report says so).
            finished = _finished_results(setup, validation.stopped_because)
            if finished:
                return finished
            _check_report_only(setup)
            return finish(setup, estimator, hooks, figures, 0.0, validation)
        _record_start(setup)
        seconds = _train(setup, stop, lambda: _train_here(setup, estimator, hooks), sets_aside_diverged=True)
        if stop.requested():
            raise Interrupted(stop.received, hooks.stop.stopped_at_step)
        return finish(setup, estimator, hooks, figures, seconds, validation)


def run_chief(task, settings, cluster, stop):
    """A cluster's chief: trains with the workers, validating between its steps (and agreeing an early
    stop with them through the model dir), then finishes; returns results.json's dict."""
    with model_dir_lib.locked(settings.model_dir):
        model_dir_lib.remove_leftovers(settings.model_dir)
        setup = prepare(task, settings, cluster, cluster_plan(settings, cluster), check_checkpoint=True)
        # Stopped early at its newest checkpoint (killed before its report, or relaunched after it): as every
        # task of the cluster decides, nobody trains. Else a stop record is an earlier run's.
        stopped = _honoured_stop(setup)
        if stopped is None and agreed_stop.remove_stop(settings.model_dir):
            log.info("removed an earlier run's stop record (%s)", agreed_stop.STOP_FILE)
        finished = _already_finished(setup) or (_finished_results(setup, stopped["because"]) if stopped else None)
        if finished:
            return finished
        pacing = _pacing(setup)
        _announce(setup, pacing)
        estimator, figures = build_estimator(setup, pacing)
        validation = _validation(setup, estimator, pacing, stop)
        stopping = stop_hook(stop.requested, stop)
        # (Else killed before its report: train_and_evaluate would step once.)
        trains = setup.start_step < setup.max_steps and stopped is None
        if stopped is not None:
            _check_report_only(setup)
            validation.stopped_by_record(setup.start_step, stopped["because"])
        # A chief that only writes the report starts no server, and waits for no cluster.
        watches = watch_trainer(cluster, settings, setup.max_steps, stop.asked,
                                lambda: stopping.stopped_at_step is not None) if trains else []
        hooks = build_training_hooks(setup, stopping, validation).adding(
            watches + _agreed_stop_hooks(setup) + _chief_validation_hooks(setup, validation))
        seconds = 0.0
        if trains:
            _record_start(setup)
            seconds = _train(setup, stop, lambda: _train_in_cluster(setup, estimator, hooks),
                             sets_aside_diverged=True)
        if validation is not None and not stop.requested():
            # The Estimator calls no saving listener in a cluster, so neither the listener's end(): the
            # final step's evaluation comes here, after the final checkpoint (none after an early stop).
            validation.end(None, model_dir_lib.latest_global_step(settings.model_dir))
        if stop.requested():
            raise Interrupted(stop.received, hooks.stop.stopped_at_step)
        return finish(setup, estimator, hooks, figures, seconds, validation,
                      {"cluster": {"strategy": settings.strategy, "training_workers": cluster.num_workers}})


def run_worker(task, settings, cluster, stop):
    """A cluster's worker: trains with the chief until it ends (or an agreed stop); returns None."""
    setup = prepare(task, settings, cluster, cluster_plan(settings, cluster))
    if setup.start_step >= setup.max_steps:  # its chief writes the report alone: a finished run, or one killed after
        log.info("worker %d: the model dir has trained to its final step %d already; nothing to train",
                 cluster.index, setup.max_steps)
        return None
    stopped = _honoured_stop(setup)
    if stopped is not None:
        log.info("worker %d: training stopped early after step %d (%s) already; nothing to train", cluster.index,
                 stopped["stop_after_step"], stopped["because"])
        return None
    finished = finished_check(settings, setup.max_steps)  # (before training: see agreed_stop.CurrentStop)
    pacing = _pacing(setup)
    _announce(setup, pacing)
    estimator, _ = build_estimator(setup, pacing, probe_peak=False)
    recheck_model_readiness_every(WORKER_READY_RECHECK_SECS)

    def wait_for_chief(step):  # its last line names the chief's checkpoint of the step they stopped after
        wait_for_chief_checkpoint(cluster, settings.model_dir, step, settings.peer_timeout_secs)
    stopping = stop_hook(stop.requested, stop, after_stop=wait_for_chief)
    hooks = build_training_hooks(setup, stopping, writes_summaries=False).adding(
        watch_trainer(cluster, settings, setup.max_steps, stop.asked, lambda: stopping.stopped_at_step is not None)
        + _agreed_stop_hooks(setup))
    _train(setup, stop, lambda: _train_in_cluster(setup, estimator, hooks))
    # (Asynchronous: the chief may not be there yet.)
    if settings.strategy == "parameter_server" and not stop.requested() \
            and not wait_for_final_checkpoint(cluster, finished):
        raise PeerLostError(lost_peer_line(f"chief 0 at {cluster.addresses['chief'][0]} before its final checkpoint",
                                           cluster, settings.model_dir))
    model_dir_lib.remove_worker_scratch(settings.model_dir, cluster.task_type, cluster.index)
    if stop.requested():
        raise Interrupted(stop.received)
    log.info("worker %d finished", cluster.index)
    return None


def run_evaluator(task, settings, cluster, stop):
    """A cluster's evaluator: evaluates each new checkpoint on the validation split (the test split
    when there is none; TensorBoard's eval_evaluator_validation, see _specs) until training ends; returns None."""
    setup = prepare(task, settings, cluster, cluster_plan(settings, cluster))
    _announce(setup, None)
    estimator, _ = build_estimator(setup, probe_peak=False, trains=False)
    watch_evaluator(cluster, settings, setup.max_steps)
    train_spec, eval_spec = _specs(setup, build_training_hooks(setup, stop_hook(stop.requested, stop)))
    with stop.training():
        # What train_and_evaluate runs on an evaluator, with a listener that also ends it after the
        # final checkpoint of an early stop (it would otherwise wait for --max-steps' for ever).
        agreed_stop.evaluate_until_training_ends(estimator, train_spec, eval_spec, settings.model_dir,
                                                 early_stopping_of(settings))
    if stop.requested():
        raise Interrupted(stop.received)
    log.info("evaluator %d finished", cluster.index)
    return None


def run_ps(task, settings, cluster, stop):
    """A parameter server: serves the cluster's variables until it is stopped; returns None. It reads
    no data and builds no model: the Estimator's distributed runtime only uses the RunConfig to start
    its server. A first stop signal from here on is left to its watch, which ends it once the chief has
    ended: one line, whether the signal came while its server started (when Python's handler can run) or
    while it served (when it cannot)."""
    watch_parameter_server(cluster, settings, stop.asked)
    with stop.training():
        config = build_run_config(settings.model_dir, cluster_plan(settings, cluster), settings.checkpoint_steps,
                                  settings.summary_steps, settings.keep_checkpoints, settings.seed)
        estimator = tf.estimator.Estimator(model_fn=_no_model, config=config)
        tf.estimator.train_and_evaluate(estimator, tf.estimator.TrainSpec(_no_input),
                                        tf.estimator.EvalSpec(_no_input))
    return None


EVALUATOR_EVAL_NAME = "evaluator"  # TensorBoard: <model dir>/eval_evaluator_validation (or _test)
ROLES = {"chief": run_chief, "worker": run_worker, "evaluator": run_evaluator, "ps": run_ps}


def _no_model(features, labels, mode):
    raise RuntimeError("a parameter server builds no model")


def _no_input():
    raise RuntimeError("a parameter server reads no data")


def _already_finished(setup):
    """Returns the results of a run already finished at these settings (re-printed), or None. Raises
    UsageError for --eval-only of a model dir with no checkpoint, FlagError for a --max-steps below the step
    an unfinished model dir reached or, where only the report is left to write, the flags _check_report_only
    refuses."""
    settings = setup.settings
    if settings.eval_only:
        if not setup.start_step:
            held = ("holds only the checkpoint of step 0, written before its first step trained"
                    if tf.train.latest_checkpoint(settings.model_dir) else "holds no checkpoint")
            raise UsageError(f"--eval-only needs a trained model dir, and {settings.model_dir} {held}; train first "
                             "(without --eval-only), or pass the --model-dir of a trained run")
        return None
    if setup.start_step < setup.max_steps:
        return None
    finished = _finished_results(setup)
    # Stopped before its report, past this run's end. (Not past the end it planned: asynchronous workers step a
    # little beyond it.)
    planned = training_record.planned_end(setup.record.segments, setup.start_step)
    if finished is None and setup.start_step > setup.max_steps and setup.max_steps != planned:
        raise FlagError(f"--max-steps {setup.max_steps}: {settings.model_dir} has trained to step {setup.start_step} "
                        f"already, and training cannot go back; pass --max-steps {setup.start_step} or more to "
                        "finish that run, or another --model-dir")
    if finished is None:
        _check_report_only(setup)
    return finished


def _finished_early(setup):
    """Returns the results of a run that stopped early at its newest checkpoint, under this run's rule too, and
    finished its report (re-printed, before any header: there is nothing to train), or None."""
    because = stopped_early_at_start(setup)
    return _finished_results(setup, because) if because else None


def _check_report_only(setup):
    """Raises FlagError for flags a run that only writes the report of a model dir stopped after its training
    (killed before its report) cannot take: another precision, batch or recipe than its last steps', which
    results.json would name as the training's."""
    settings, recipe = setup.settings, training_record.recipe_of(setup.settings)
    training_record.check_same_recipe(setup.record.segments, setup.start_step, recipe, settings.model_dir)
    training_record.check_report_flags(setup.record.segments, setup.start_step, settings.precision,
                                       setup.global_batch, recipe, settings.model_dir)


def _finished_results(setup, stopped_because=None):
    model_dir = setup.settings.model_dir
    recipe_differs = training_record.recipe_not_trained_with(setup.record.segments, setup.start_step,
                                                             training_record.recipe_of(setup.settings))
    unconvertible = False
    if setup.settings.tflite:  # (the validation record is read only for the note it decides)
        best = read_record(model_dir)["best"]
        unconvertible = training_record.eval_only_cannot_convert(setup.record.segments, setup.start_step,
                                                                 best["step"] if best else None)
    results = finished_results(model_dir, setup.start_step, setup.max_steps, setup.settings, stopped_because,
                               recipe_differs, unconvertible)
    if results is not None and not hparams.recorded(model_dir):  # a kill between results.json and this record
        hparams.write_hparams(model_dir, results)
    return results


def _pacing(setup):
    """Returns the Pacing of the validation's cadence (when its evaluations come and may start), or
    None when there is no validation split."""
    if setup.data.validation_input_fn is None:
        return None
    return Pacing(cadence_for(setup.settings, setup.steps, setup.data.num_train_examples), setup.max_steps)


def _announce(setup, pacing):
    print_header(setup, pacing.cadence if pacing else None)
    warn_about(setup)


def _validation(setup, estimator, pacing, stop):
    """Returns the ValidationListener of a run that validates (a `pacing`), exporting each new best;
    else None."""
    if pacing is None:
        return None
    return build_validation(setup, estimator, pacing, stop.requested, _best_export(setup, estimator),
                            evaluation_report.scores_made_with(setup.settings, setup.data))


def _best_export(setup, estimator):
    """Returns the function exporting a new best checkpoint (None: the task exports nothing)."""
    data, settings = setup.data, setup.settings
    if not data.serving_input_fn:
        return None
    return lambda checkpoint: export_model(estimator, data.serving_input_fn, data.class_names,
                                           storage.join(settings.model_dir, BEST_EXPORT_DIR), checkpoint)


def _record_start(setup):
    """Writes this run's segment to the training record, last before training: a failure before it
    leaves the record as it was."""
    if setup.start_step < setup.max_steps:
        training_record.record_start(setup.settings.model_dir, setup.task.name, setup.record, setup.steps,
                                     setup.trained_on, setup.settings, _started_from(setup))


def _started_from(setup):
    """Returns the record of the weights the model dir's first run started from, for the segment this run
    writes: its --init-from's, or for a run going on from step 0 (its first checkpoint), the one on record."""
    if setup.initial_weights:
        return setup.initial_weights.as_record()
    return initial_weights.started_from(setup.record.segments) if not setup.start_step else None


def _honoured_stop(setup):
    """Returns the stop record of a cluster's training that stopped early at the newest checkpoint under this run's
    rule (agreed_stop.honoured_stop), or None (none, an earlier run's, or no validation split)."""
    if setup.data.validation_input_fn is None or setup.settings.eval_only:
        return None
    return agreed_stop.honoured_stop(setup.settings.model_dir, setup.start_step, early_stopping_of(setup.settings))


def _agreed_stop_hooks(setup):
    """Returns the hook that stops a trainer after the step an early stop was agreed on (none without
    early stopping or a validation split)."""
    settings = setup.settings
    asked = settings.stop_at_accuracy is not None or settings.patience
    if setup.data.validation_input_fn is None or not asked:
        return []
    return [StopAtAgreedStepHook(agreed_stop.StopStepReader(settings.model_dir))]


def _chief_validation_hooks(setup, validation):
    """Returns the chief's hook validating between its steps (none without a validation split)."""
    if validation is None:
        return []
    return [BetweenStepsHook(agreed_stop.ChiefValidation(validation, setup.settings.model_dir, setup.start_step))]


def _specs(setup, hooks):
    """Returns train_and_evaluate's (TrainSpec, EvalSpec): the evaluator evaluates the validation split,
    or the test split when there is none. Its summaries go to a folder of their own (eval_evaluator_<split>):
    the chief writes eval_validation itself, and two writers there plotted each step twice (and, starting in
    the same second on one host, could open the same event file name)."""
    data = setup.data
    evaluated = ((data.validation_input_fn, f"{EVALUATOR_EVAL_NAME}_validation") if data.validation_input_fn
                 else (data.eval_input_fn, f"{EVALUATOR_EVAL_NAME}_test"))
    train_spec = tf.estimator.TrainSpec(data.train_input_fn, max_steps=setup.max_steps, hooks=hooks.all,
                                        saving_listeners=hooks.listeners)
    eval_spec = tf.estimator.EvalSpec(evaluated[0], steps=None, name=evaluated[1], start_delay_secs=0,
                                      throttle_secs=setup.settings.eval_throttle_secs)
    return train_spec, eval_spec


def _train_here(setup, estimator, hooks):
    """Trains on this machine to the planned final step (nothing when it is reached already)."""
    if setup.start_step < setup.max_steps:
        estimator.train(setup.data.train_input_fn, hooks=list(hooks.all), max_steps=setup.max_steps,
                        saving_listeners=list(hooks.listeners))


def _train_in_cluster(setup, estimator, hooks):
    """Trains with the cluster through train_and_evaluate (the chief and the workers)."""
    tf.estimator.train_and_evaluate(estimator, *_specs(setup, hooks))


def _train(setup, stop, training, sets_aside_diverged=False):
    """Runs `training()` with the stop signals left to the training hook; returns the seconds spent.
    Raises TrainingError when the loss diverges (with the diverged checkpoint set aside, by the
    process that writes the model dir: `sets_aside_diverged`)."""
    model_dir, train_start = setup.settings.model_dir, time.perf_counter()
    with stop.training():
        try:
            training()
        except DivergenceError as e:
            if sets_aside_diverged:  # the saver runs before the loss check: it may have saved diverged weights
                model_dir_lib.set_aside_diverged(model_dir, e.step)
            checkpoint = tf.train.latest_checkpoint(model_dir)
            described = checkpoint.rsplit("/", 1)[-1] if checkpoint else "none yet (the run starts from scratch)"
            raise TrainingError(
                f"{e}: the learning rate is likely too high. Lower --learning-rate (or the batch) and run again "
                f"to resume from the last good checkpoint, {described}, or start afresh with another "
                "--model-dir") from None
    return time.perf_counter() - train_start
