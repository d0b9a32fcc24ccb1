"""The run's settings, checked once at the edge: where it runs, what data and steps it has, and the
learning-rate schedule, all known good before a model is built."""
import dataclasses
import logging
import os
import tempfile
import uuid
from typing import Optional

import tensorflow as tf

from acquisition import storage
from models.learning_rate import ScheduledRate
from pipeline import batching, determinism, estimator as estimator_lib, model_dir as model_dir_lib, progress, \
    test_report, validation as validation_lib
from pipeline.distribution import build_cluster_distribution, build_distribution
from pipeline.errors import UsageError
from pipeline.mixing_flags import check_mixing
from pipeline.machine import precision_warning

log = logging.getLogger(__name__)


@dataclasses.dataclass
class RunSetup:
    """What a run knows before it builds its model: its task and flags, its place in a cluster
    (None on one machine), the DistributionPlan, the data, the steps planned and the rate."""
    task: object
    args: object
    cluster: Optional[object]
    chief: bool
    plan: object  # pipeline.distribution.DistributionPlan
    data: object = None  # pipeline.tasks.TaskData
    record: object = None  # progress.Record read at the start
    trained_on: Optional[dict] = None
    global_batch: int = 0
    learning_rate: float = 0.0  # the base rate, scaled with the global batch
    start_step: int = 0
    steps: object = None  # progress.Plan
    schedule: object = None  # ScheduledRate
    seed_defaulted: bool = False  # --deterministic without --seed: seed 0

    @property
    def max_steps(self):
        return self.steps.max_steps


def ensure_writable_dir(path):
    """Creates `path` if needed; raises UsageError when it cannot be written to. A URL (gs://...) is
    checked through tf.io.gfile, a file written and removed, and never made a local folder."""
    if storage.is_url(path):
        probe = storage.join(path, f".tmp-write-check-{uuid.uuid4().hex[:8]}")
        try:
            storage.makedirs(path)
            storage.write_atomically(probe, b"")
            storage.remove(probe)
        except tf.errors.OpError as e:
            raise UsageError(f"cannot write to the model dir {path}: {storage.url_failure(path, e.message)}; "
                             "pass --model-dir with a folder or bucket you can write to") from None
        return
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


def prepare_run(setup):
    """Fills `setup` (a RunSetup with its plan) with the data, the steps and the schedule; returns it.

    Raises UsageError (or the data's errors) for flags, data or a model dir that cannot go together.
    """
    task, args = setup.task, setup.args
    setup.record = progress.read(args.model_dir, task.name)
    data = setup.data = task.prepare_data(args, args.batch_size)  # a recipe (TaskData.recipe) may set the batch
    test_report.check_positive_classes(args, data.class_names)
    validation_lib.check_validation_split(args, data)
    test_report.check_calibration(args, data)
    validation_lib.check_early_stopping(args, data)
    check_mixing(args)  # after the data: a recipe may set the batch
    setup.global_batch = args.batch_size * setup.plan.replicas
    setup.learning_rate = batching.scaled_learning_rate(
        args.learning_rate, setup.global_batch, args.reference_batch_size, args.lr_scaling)
    setup.trained_on = progress.describe_data(data.source == "synthetic", data.num_train_examples)
    progress.check_same_data(setup.record, setup.trained_on, args.model_dir)
    if setup.chief:
        model_dir_lib.restorable_checkpoint(args.model_dir)
    setup.start_step = estimator_lib.latest_global_step(args.model_dir)
    setup.steps = progress.plan(setup.record.segments, setup.start_step, setup.global_batch,
                                data.num_train_examples, epochs=None if args.max_steps else args.epochs,
                                max_steps=args.max_steps)
    determinism.position_input(setup)
    setup.schedule = ScheduledRate(
        setup.learning_rate, setup.steps.images_at_end, args.lr_schedule,
        round(args.warm_up_epochs * data.num_train_examples), images_per_step=setup.global_batch,
        start_step=setup.start_step, images_at_start=setup.steps.images_at_start)
    return setup


def warn_about(setup):
    """Logs what the user should know of the settings before training: images assumed, precision."""
    if setup.steps.assumed:
        log.warning("%s keeps no record of the images trained before step %d (a run of an earlier version): "
                    "counted as %d steps of this run's %d-image global batch", setup.args.model_dir,
                    setup.start_step, setup.start_step, setup.global_batch)
    warning = precision_warning(setup.args.precision, setup.plan.devices[0].startswith("/gpu"))
    if warning:
        log.warning(warning)
