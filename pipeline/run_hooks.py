"""The training hooks of a run, built in one place."""
import dataclasses
from typing import List

import hooks as hooks_lib
from hooks.checkpoint_timer import CheckpointTimer
from hooks.examples_per_second import ExamplesPerSecondHook
from hooks.learning_rate import LearningRateHook
from hooks.loss_watch import LossWatchHook
from hooks.progress import ProgressHook
from hooks.stop import BetweenStepsHook, StopAtAgreedStepHook, StopOnRequestHook
from pipeline import agreed_stop
from pipeline.cluster_run import wait_for_chief_checkpoint, watch_cluster


@dataclasses.dataclass
class TrainingHooks:
    """A run's training hooks (`all`, in the order they run) and its saving listeners, with the ones
    whose figures the results read by name."""
    all: List
    listeners: List
    stop: StopOnRequestHook
    loss_watch: LossWatchHook
    rate: LearningRateHook
    checkpoint_timer: CheckpointTimer

    def throughput(self):
        """Returns the ExamplesPerSecondHook's summary, or None when --hooks leaves it out."""
        for hook in self.all:
            if isinstance(hook, ExamplesPerSecondHook):
                return hook.summary()
        return None


def _stop_hook(setup, stop_requested, signals):
    cluster = setup.cluster
    if signals is None:
        return StopOnRequestHook(stop_requested)
    after_stop = None
    if cluster is not None and cluster.trains and not cluster.is_chief:
        def after_stop(step):
            wait_for_chief_checkpoint(cluster, setup.args.model_dir, step, setup.args.peer_timeout_secs)
    return StopOnRequestHook(stop_requested, signal_received=lambda: signals.received, on_agreed=signals.agree,
                             after_stop=after_stop)


class TimeElsewhere:
    """The seconds its parts (objects with `seconds`) spent outside the training steps, added up."""

    def __init__(self, *parts):
        self._parts = [p for p in parts if p is not None]

    @property
    def seconds(self):
        return sum(p.seconds for p in self._parts)


def build_training_hooks(setup, stop_requested, validation=None, signals=None):
    """Returns the TrainingHooks of `setup` (a prepared RunSetup); `stop_requested()` is true once a
    stop signal came (`signals`, the run loop's StopSignals, or None for a benchmark's own stop). `validation` (a ValidationListener, or None) evaluates after the checkpoints it
    needs. In a cluster they include the watches of its peers (see watch_cluster), and the hooks that
    validate between the chief's steps and stop every trainer after the step the chief agreed on
    (pipeline.agreed_stop). Under multi_worker_mirrored a stop signal to any trainer stops every
    trainer after the same step (hooks.stop.StopOnRequestHook), and a worker's last line names the
    chief's checkpoint of that step."""
    args = setup.args
    stop_hook, loss_watch = _stop_hook(setup, stop_requested, signals), LossWatchHook(args.log_steps)
    rate_hook = LearningRateHook(args.model_dir if setup.chief else None, args.summary_steps)
    # The checkpoint timer measures each write of the Estimator's checkpoint saver, which runs
    # before every hook here, and the validation listener its evaluations after those writes:
    # the throughput hook leaves both out of its steps.
    checkpoint_timer = CheckpointTimer()
    train_hooks = [stop_hook] + hooks_lib.build_hooks(
        args.hooks, global_batch_size=setup.global_batch, model_dir=args.model_dir,
        every_n_steps=args.summary_steps, warm_up_steps=args.warm_up_steps, profile_steps=args.log_steps,
        excluded_time=TimeElsewhere(checkpoint_timer, validation)) \
        + [loss_watch, rate_hook, ProgressHook(setup.max_steps, setup.global_batch, args.log_steps)]
    train_hooks += watch_cluster(setup.cluster, args, setup.max_steps,
                                 stop_signal=signals.asked if signals else None,
                                 stop_taken=lambda: stop_hook.stopped_at_step is not None)
    listeners = [checkpoint_timer]
    if setup.cluster is None:
        listeners += [validation] if validation is not None else []
    elif setup.data.validation_input_fn is not None:  # a cluster's chief validates (pipeline.agreed_stop)
        if args.stop_at_accuracy is not None or args.patience:  # every trainer then reads the stop record
            train_hooks.append(StopAtAgreedStepHook(agreed_stop.StopStepReader(args.model_dir)))
        if validation is not None:
            train_hooks.append(BetweenStepsHook(agreed_stop.ChiefValidation(validation, args.model_dir,
                                                                            setup.start_step)))
    return TrainingHooks(train_hooks, listeners, stop_hook, loss_watch, rate_hook, checkpoint_timer)
