"""The training hooks every role of a run shares, built in one place; a role adds its own (a
cluster's watches, the chief's validation between steps) with TrainingHooks.adding."""
import dataclasses
from typing import Tuple

import hooks as hooks_lib
from hooks.checkpoint_timer import CheckpointTimer
from hooks.examples_per_second import ExamplesPerSecondHook
from hooks.learning_rate import LearningRateHook
from hooks.loss_watch import LossWatchHook
from hooks.progress import ProgressHook
from hooks.stop import StopOnRequestHook


@dataclasses.dataclass(frozen=True)
class TrainingHooks:
    """A run's training hooks (`all`, in the order they run) and its saving listeners, with the ones
    whose figures the results read by name."""
    all: Tuple
    listeners: Tuple
    stop: StopOnRequestHook
    loss_watch: LossWatchHook
    rate: LearningRateHook
    checkpoint_timer: CheckpointTimer

    def adding(self, hooks=(), listeners=()):
        """Returns these hooks with `hooks` run after them and `listeners` called after theirs."""
        return dataclasses.replace(self, all=self.all + tuple(hooks), listeners=self.listeners + tuple(listeners))

    def throughput(self):
        """Returns the ExamplesPerSecondHook's summary, or None when --hooks leaves it out."""
        for hook in self.all:
            if isinstance(hook, ExamplesPerSecondHook):
                return hook.summary()
        return None


def stop_hook(stop_requested, signals=None, after_stop=None):
    """Returns the StopOnRequestHook ending training once `stop_requested()`; with `signals` (the run's
    pipeline.signals.StopSignals) a stop agreed with a cluster's other trainers stops it too, and
    `after_stop(step)` runs after such a stop (a worker waits there for the chief's checkpoint)."""
    if signals is None:
        return StopOnRequestHook(stop_requested)
    return StopOnRequestHook(stop_requested, signal_received=lambda: signals.received, on_agreed=signals.agree,
                             after_stop=after_stop)


class TimeElsewhere:
    """The seconds its parts (objects with `seconds`) spent outside the training steps, added up."""

    def __init__(self, *parts):
        self._parts = [p for p in parts if p is not None]

    @property
    def seconds(self):
        return sum(p.seconds for p in self._parts)


def build_training_hooks(setup, stop, validation=None, writes_summaries=True):
    """Returns the TrainingHooks of `setup` (a RunSetup) that every trainer runs: `stop` (see
    stop_hook) first, then --hooks (writing files with `writes_summaries`: a cluster's workers would write
    over the chief's), the loss watch, the learning rate (written to TensorBoard with `writes_summaries`)
    and the progress line. `validation` (a ValidationListener, or None) is left
    out of the timed steps; the role that runs it adds it where it belongs."""
    settings = setup.settings
    loss_watch = LossWatchHook(settings.log_steps)
    summary_dir = settings.model_dir if writes_summaries else None
    rate_hook = LearningRateHook(summary_dir, settings.summary_steps)
    # The checkpoint timer measures each write of the Estimator's checkpoint saver, which runs
    # before every hook here, and the validation listener its evaluations after those writes:
    # the throughput hook leaves both out of its steps.
    checkpoint_timer = CheckpointTimer()
    train_hooks = [stop] + hooks_lib.build_hooks(
        settings.hooks, global_batch_size=setup.global_batch, model_dir=summary_dir,
        every_n_steps=settings.summary_steps, warm_up_steps=settings.warm_up_steps, profile_steps=settings.log_steps,
        excluded_time=TimeElsewhere(checkpoint_timer, validation)) \
        + [loss_watch, rate_hook, ProgressHook(setup.max_steps, setup.global_batch, settings.log_steps)]
    return TrainingHooks(tuple(train_hooks), (checkpoint_timer,), stop, loss_watch, rate_hook, checkpoint_timer)
