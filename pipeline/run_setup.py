"""What a run knows before it builds its model, fixed once at the edge: where it runs, its settings
with the data's recipe, the data, the steps planned and the learning-rate schedule, all checked
before a model is built. RunSetup is built whole by prepare() and never changed."""
import dataclasses
import logging
import os
import tempfile
import uuid
from typing import Optional

import tensorflow as tf

from acquisition import storage
from models.learning_rate import ScheduledRate
from pipeline import batching, determinism, estimator as estimator_lib, evaluation_report, initial_weights, \
    ema as ema_lib, model_dir as model_dir_lib, training_record, tta, undecodable
from pipeline.distribution import build_cluster_distribution, build_distribution
from pipeline.errors import FlagError, UsageError
from pipeline.machine import precision_warning
from pipeline import results as results_lib
from pipeline.results import RESULTS_FILE
from pipeline.tasks import VALIDATION_FILES
from pipeline.validation.checks import check_early_stopping, check_validation_split
from pipeline.validation.early_stopping import early_stopping_of
from pipeline.validation.listener import stopped_early
from pipeline.validation.record import read_record
from pipeline.validation.split import check_same_split

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class RunSetup:
    """What a run knows before it builds its model: its task and Settings, its place in a cluster
    (None on one machine: for the header and results, never to choose what to do), the
    DistributionPlan, the data, the steps planned and the rate, and the weights a new run starts from."""
    task: object
    settings: object  # pipeline.settings.Settings, with the data's recipe
    cluster: Optional[object]
    plan: object  # pipeline.distribution.DistributionPlan
    data: object  # pipeline.tasks.TaskData, its evaluation inputs mirrored when mirrored_evaluation
    record: object  # training_record.Record read at the start
    trained_on: dict
    global_batch: int
    learning_rate: float  # the base rate, scaled with the global batch
    start_step: int
    steps: object  # training_record.Plan
    schedule: object  # ScheduledRate
    mirrored_evaluation: bool = False
    initial_weights: Optional[object] = None  # pipeline.initial_weights.InitialWeights of a new --init-from run

    @property
    def max_steps(self):
        return self.steps.max_steps


def ensure_writable_dir(path):
    """Creates `path` if needed; returns the outermost local folder it made (`path` or one of its parents), or
    None. Raises UsageError when it cannot be written to. A URL (gs://...) is checked through tf.io.gfile, a file
    written and removed, and never made a local folder."""
    if storage.is_url(path):
        probe = storage.join(path, f".tmp-write-check-{uuid.uuid4().hex[:8]}")
        try:
            storage.makedirs(path)
            storage.write_atomically(probe, b"")
            storage.remove(probe)
        except tf.errors.OpError as e:
            raise UsageError(f"cannot write to the model dir {path}: {storage.url_failure(path, e.message)}; "
                             "pass --model-dir with a folder or bucket you can write to") from None
        return None
    made = None
    parent = os.path.abspath(path)
    while not os.path.isdir(parent) and os.path.dirname(parent) != parent:
        made, parent = parent, os.path.dirname(parent)
    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as e:
        finished = (f": the {RESULTS_FILE} of its run is there to read (scripts/compare_runs.py {path} shows it), and "
                    "any run of it, even one that only prints them again, needs it writable; make it writable, or"
                    if os.path.isfile(os.path.join(path, RESULTS_FILE)) else ";")
        raise UsageError(f"cannot write to the model dir {path} ({e.strerror}){finished} pass --model-dir with a "
                         "folder you can write to") from None
    return made


def local_plan(settings):
    """Returns the DistributionPlan of `settings` on one machine (mirrored or central storage)."""
    if settings.strategy not in ("mirrored", "central_storage"):
        raise UsageError(f"--strategy {settings.strategy} needs a cluster in TF_CONFIG; start one with "
                         "scripts/launch_local_cluster.py, or use --strategy mirrored")
    return build_distribution(gpus=settings.gpus, cpu_replicas=settings.cpu_replicas, strategy=settings.strategy)


def cluster_plan(settings, cluster):
    """Returns the DistributionPlan of this task of a TF_CONFIG `cluster` (see build_cluster_distribution)."""
    # The Estimator's multi-worker runtime (the distribute coordinator) works in graph mode only.
    tf.compat.v1.disable_eager_execution()
    return build_cluster_distribution(settings.strategy, cluster, gpus=settings.gpus,
                                      cpu_replicas=settings.cpu_replicas)


def prepare(task, settings, cluster, plan, check_checkpoint=False, reprints_early_stop=False):
    """Returns the RunSetup of `task` under `settings` on `plan`: the data prepared (and its recipe
    taken into the settings), the steps planned from the model dir's record, the training input
    positioned for a resumed --deterministic run and the evaluation inputs mirrored when the plan
    mirrors evaluation. `check_checkpoint` (the process that writes the model dir) first checks
    that its newest checkpoint can be restored, setting a damaged one aside, unless the run only reprints
    a finished run's results (at its final step, or stopped early there where the caller
    `reprints_early_stop`: one machine's run does, a cluster's chief does not).

    Raises UsageError (or the data's errors) for flags, data or a model dir that cannot go together.
    """
    initial = _initial_weights(settings)  # before the data is read: a wrong folder fails at once
    data = task.prepare_data(settings, settings.batch_size)
    if data.recipe_values:
        settings = settings.replace(**data.recipe_values)
    _check_data(settings, data)
    if initial:
        initial_weights.check_same_classes(initial.model_dir, initial_weights.recorded_classes(initial.model_dir),
                                           data.class_names)
    record = training_record.read(settings.model_dir, task.name)
    global_batch = settings.batch_size * plan.replicas
    held_out = data.num_validation_examples and not getattr(settings, "validation_dir", None)
    trained_on = training_record.describe_data(data.source == "synthetic", data.num_train_examples,
                                               settings.validation_fraction if held_out else None)
    # An evaluation counts no epochs and reads no validation split, but a report fitted on a validation split
    # other than training's would fit on images the model trained on.
    validates = not settings.eval_only or evaluation_report.uses_validation(settings)
    training_record.check_same_data(record, trained_on, settings.model_dir, training=validates,
                                    skipped=data.report.get("skipped_files", ()),
                                    undecodable=data.report.get("undecodable_left_out", ()))
    if check_checkpoint:  # (a copied model dir's checkpoint file names the original's: the checks read these)
        model_dir_lib.point_state_here(settings.model_dir)
    final = _final_checkpoint_of_finished_run(settings.model_dir) if check_checkpoint else None
    if check_checkpoint and final is None:
        model_dir_lib.restorable_checkpoint(settings.model_dir)
    setup, warnings = _planned(task, settings, cluster, plan, data, record, trained_on, global_batch, validates,
                               initial)
    if final is not None and not _only_reprints(setup, final.results, reprints_early_stop):
        # It reads its checkpoints after all: a damaged final one is set aside, and the run planned from the one
        # before it.
        if model_dir_lib.restorable_checkpoint(settings.model_dir) != final.prefix:
            setup, warnings = _planned(task, settings, cluster, plan, data, record, trained_on, global_batch,
                                       validates, initial)
    elif final is not None:  # reprinted
        problem = model_dir_lib.checkpoint_problem(final.prefix)
        if problem:
            log.warning("%s cannot be read (%s): the run finished there, and its results and exports are whole; a "
                        "run that trains on from here sets it aside and resumes from the newest checkpoint that "
                        "reads", final.prefix, problem)
    for warning in warnings:  # the plan's, once: after every refusal, so a refused run's one line is its only one
        log.warning(warning)
    return setup


@dataclasses.dataclass(frozen=True)
class _FinalCheckpoint:
    prefix: str  # the newest checkpoint's, the step results.json records
    results: dict  # results.json's


def _final_checkpoint_of_finished_run(model_dir):
    """Returns the _FinalCheckpoint of `model_dir` when results.json records a run finished at its newest
    checkpoint's step, else None. A rerun of that run reprints its results without restoring the checkpoint: a
    damaged one is named in a warning, not set aside (which would train the steps after the one before it
    again)."""
    try:
        results = results_lib.read_results(model_dir)
    except (OSError, ValueError):  # none yet, or damaged (finished_results names it)
        return None
    step = model_dir_lib.latest_global_step(model_dir)  # (the checkpoint file's newest, which a run resumes from)
    if not step or not isinstance(results, dict) or results.get("global_step") != step:
        return None
    newest = model_dir_lib.candidate_checkpoints(model_dir)[0]  # (none newer on disk than the file names)
    return _FinalCheckpoint(newest, results) if model_dir_lib.step_of_checkpoint(newest) == step else None


def _only_reprints(setup, results, reprints_early_stop):
    """Returns whether the run `setup` plans reprints the finished run whose `results` are on record, restoring no
    checkpoint: one at or past its final step, or (where the caller `reprints_early_stop`) stopped early at its
    start step under its own rule and this run's, as pipeline.roles.run_local reprints them; not an
    evaluation."""
    if setup.settings.eval_only:
        return False
    if setup.start_step >= setup.steps.max_steps:
        return True
    if not reprints_early_stop:
        return False
    because = stopped_early_at_start(setup)
    return because is not None and results.get("stopped_because") == because


def stopped_early_at_start(setup):
    """Returns why the validation record stops training at the run's start step under its settings' rule
    ('target_accuracy', 'patience'), or None: no validation split, an evaluation, or no early stop there."""
    if setup.settings.eval_only or setup.data.validation_input_fn is None:
        return None
    return stopped_early(read_record(setup.settings.model_dir), setup.start_step,
                         early_stopping_of(setup.settings))


def _planned(task, settings, cluster, plan, data, record, trained_on, global_batch, validates, initial):
    """Returns the RunSetup planned from the newest checkpoint of the model dir (the steps, the checks of a
    resume, the schedule and the inputs positioned), and the warnings of that plan, for the user."""
    start_step = model_dir_lib.latest_global_step(settings.model_dir)
    if start_step and validates:
        check_same_split(storage.join(settings.model_dir, VALIDATION_FILES), data.validation_files,
                         undecodable.left_out(settings.model_dir))
    # (--eval-only trains nothing: its own figures, and an int8 conversion's, are reproducible whatever trained.)
    training_record.check_reproducible(record.segments, start_step, settings.deterministic and not settings.eval_only,
                                       settings.seed, settings.model_dir, settings.precision, settings.tflite)
    training_record.check_same_image_size(record.segments, start_step, getattr(settings, "image_size", None),
                                          settings.model_dir)
    training_record.check_same_decode(record.segments, start_step, getattr(settings, "decode", None),
                                      settings.model_dir)
    training_record.check_same_model(record.segments, start_step, getattr(settings, "model", None),
                                     settings.model_dir)
    steps = training_record.plan(record.segments, start_step, global_batch, data.num_train_examples,
                                 epochs=None if settings.max_steps else settings.epochs, max_steps=settings.max_steps)
    learning_rate = batching.scaled_learning_rate(settings.learning_rate, global_batch,
                                                  settings.reference_batch_size, settings.lr_scaling)
    warnings = []
    if not settings.eval_only and start_step < steps.max_steps:  # an evaluation builds no optimizer
        _check_decay(settings, learning_rate)
        training_record.check_same_trainable_layers(record.segments, start_step,
                                                    training_record.trainable_layers_of(settings), settings.model_dir)
        rate_changed = training_record.check_same_recipe(record.segments, start_step,
                                                         training_record.recipe_of(settings), settings.model_dir)
        warnings = [training_record.batch_changed(record.segments, start_step, global_batch), rate_changed,
                    training_record.precision_changed(record.segments, start_step, settings.precision),
                    training_record.schedule_moved(record.segments, start_step, steps, settings.lr_schedule),
                    ema_lib.too_few_steps(getattr(settings, "ema", None), steps.max_steps),
                    tta.untrained_flip(getattr(settings, "tta", ()), getattr(settings, "augment", ()))]
    if settings.eval_only or start_step < steps.max_steps:  # a finished run only reprints its results
        _check_finishing_flags(settings, record, start_step, keeps_best=data.validation_input_fn is not None)
    schedule = ScheduledRate(
        learning_rate, steps.images_at_end, settings.lr_schedule,
        round(settings.warm_up_epochs * data.num_train_examples), images_per_step=global_batch,
        start_step=start_step, images_at_start=steps.images_at_start)
    mirrored = mirrors_evaluation(settings, plan, data)
    data = determinism.positioned_input(settings, data, steps.images_at_start)
    data = mirrored_inputs(data, settings.batch_size, plan.replicas) if mirrored else data
    warnings.append(initial_weights.resume_warning(settings, record.segments, start_step))
    return RunSetup(task, settings, cluster, plan, data, record, trained_on, global_batch, learning_rate,
                    start_step, steps, schedule, mirrored, initial if not start_step else None), \
        [warning for warning in warnings if warning]


def _initial_weights(settings):
    """Returns the InitialWeights of --init-from for a model dir without a checkpoint (a new run); None
    without the flag, or for a model dir that goes on from its own checkpoints."""
    if not getattr(settings, "init_from", None) or model_dir_lib.candidate_checkpoints(settings.model_dir):
        return None  # (candidates: with a checkpoint file lost too, the checkpoints it named)
    initial = initial_weights.resolve(settings.init_from)
    initial_weights.check_same_model(initial.model_dir, settings)
    return initial


def _check_finishing_flags(settings, record, start_step, keeps_best):
    """Raises FlagError (exit 2) for an --ema decay or a --tflite conversion the model dir's steps cannot take;
    the export converted is the best's that validation kept when it keeps one (`keeps_best`: a validating
    run; --eval-only tests the best recorded)."""
    training_record.check_same_ema_decay(record.segments, start_step, getattr(settings, "ema", None),
                                         settings.model_dir)
    best = read_record(settings.model_dir)["best"] if start_step and (keeps_best or settings.eval_only) else None
    training_record.check_convertible(record.segments, start_step, settings.tflite, settings.model_dir,
                                      settings.eval_only, best["step"] if best else None)


def _check_decay(settings, learning_rate):
    """Raises FlagError (exit 2) when --weight-decay at the run's peak `learning_rate` multiplies the kernels by
    1 - rate x W <= 0 a step: zeroed or flipped in sign every step, which trained to chance, without a word."""
    decay = getattr(settings, "weight_decay", 0.0)
    if decay and learning_rate * decay >= 1:
        raise FlagError(f"--weight-decay {decay:g} at this run's rate of {learning_rate:g} multiplies the kernels by "
                        f"1 - {learning_rate:g} x {decay:g} = {1 - learning_rate * decay:.3g} a step, which zeroes or "
                        f"flips them; pass a --weight-decay below {1 / learning_rate:g}")


def _check_data(settings, data):
    """Raises FlagError (exit 2) for flags the data cannot serve (see the checks called)."""
    evaluation_report.check_positive_classes(settings, data.class_names)
    check_validation_split(settings, data)
    evaluation_report.check_calibration(settings, data)
    check_early_stopping(settings, data)


def mirrors_evaluation(settings, plan, data):
    """Returns whether evaluations run mirrored over the replicas: a mirrored plan (one machine's:
    a cluster takes no other strategy than multi_worker_mirrored or parameter_server) with more than
    one replica and no fewer evaluation examples than replicas."""
    sizes = [data.num_eval_examples] + ([data.num_validation_examples] if data.validation_input_fn else [])
    return plan.replicas >= 2 and settings.strategy == "mirrored" and min(sizes) >= plan.replicas


def mirrored_inputs(data, batch_size, replicas):
    """Returns `data` with evaluation inputs in batches every replica gets its share of."""
    def mirrored(input_fn, num_examples):
        return estimator_lib.replica_batched_input_fn(input_fn, num_examples, batch_size, replicas)
    return dataclasses.replace(
        data, eval_input_fn=mirrored(data.eval_input_fn, data.num_eval_examples),
        validation_input_fn=data.validation_input_fn and mirrored(data.validation_input_fn,
                                                                  data.num_validation_examples))


def warn_about(setup):
    """Logs what the user should know of the settings before training: images assumed, precision."""
    if setup.steps.assumed:
        log.warning("%s keeps no record of the images trained before step %d (a run of an earlier version): "
                    "counted as %d steps of this run's %d-image global batch", setup.settings.model_dir,
                    setup.start_step, setup.start_step, setup.global_batch)
    warnings = (precision_warning(setup.settings.precision, setup.plan.devices[0].startswith("/gpu")),
                evaluation_report.calibration_warning(setup.settings, setup.data), _profiler_warning(setup),
                _memory_model_dir_warning(setup.settings.model_dir))
    for warning in filter(None, warnings):
        log.warning(warning)


def _memory_model_dir_warning(model_dir):
    """Returns one line for a model dir on ram://, which lives in this process's memory; else None."""
    if not str(model_dir or "").startswith("ram://"):
        return None
    return (f"the model dir {model_dir} is in this process's memory (ram://): its checkpoints, export and "
            "results.json are gone when the run ends; pass a folder or a bucket to keep them")


def _profiler_warning(setup):
    """Returns one line when --hooks profiler will trace no step of a run that trains: it traces every
    --log-steps steps, the first that many steps after the run starts and never its first step
    (tf.estimator.ProfilerHook), and this run trains fewer; else None."""
    steps, every = setup.max_steps - setup.start_step, setup.settings.log_steps
    if "profiler" not in setup.settings.hooks or setup.settings.eval_only or steps <= 0 or steps >= max(every, 2):
        return None
    fix = "train 2 steps or more" if steps == 1 else f"pass --log-steps {steps} or fewer"
    return (f"--hooks profiler traces one step every --log-steps ({every}) steps, never a run's first, and this run "
            f"trains {steps}: it will write no timeline; {fix}")
