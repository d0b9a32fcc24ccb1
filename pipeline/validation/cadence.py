"""When the validation split is evaluated: every N global steps, every N epochs of images, or the
auto cadence (every epoch, held back so that evaluation takes at most 5% of training)."""
import dataclasses
import math
import time
from typing import Callable, Optional

# The auto cadence waits, after an evaluation of E seconds, for AUTO_TRAINING_FACTOR x E seconds of
# training before the next: evaluation then takes at most 1/(1 + 19) = 5% of each stretch of training.
AUTO_TRAINING_FACTOR = 19


@dataclasses.dataclass(frozen=True)
class Cadence:
    """When an evaluation is due: every `every_steps` global steps, or each time another
    `every_images` images have been trained (images counted from `images_at(step)`). With `auto`
    (the default cadence), an evaluation also waits for AUTO_TRAINING_FACTOR times the last one's
    seconds of training since it ended (see pipeline.validation.listener)."""
    every_steps: Optional[int]
    every_images: Optional[int]
    images_at: Callable[[int], int]
    auto: bool = False
    epochs: Optional[float] = None  # what every_images is in epochs, for describe()

    def describe(self):
        """Returns the cadence in words, for the run header."""
        if self.every_steps:
            return f"every {self.every_steps} global steps (--eval-every-steps)"
        if not self.auto:
            return f"every {self.epochs:g} epoch(s) of images (--eval-every-epochs)"
        return (f"every epoch, but not before {AUTO_TRAINING_FACTOR}x the last evaluation's seconds of training "
                "since it, nor that close to the final step's (evaluation <= 5% of training; "
                "--eval-every-epochs/--eval-every-steps for exact)")

    def due(self, step, last_step):
        """Returns whether a checkpoint at `step` is due for evaluation after one at `last_step`."""
        if self.every_steps:
            return step // self.every_steps > last_step // self.every_steps
        return self.images_at(step) // self.every_images > self.images_at(last_step) // self.every_images

    def checkpoint_steps(self, global_batch, checkpoint_steps):
        """Returns the checkpoint cadence that gives each due evaluation a checkpoint in time."""
        every = self.every_steps or math.ceil(self.every_images / global_batch)
        return max(1, min(checkpoint_steps, every))


class Pacing:
    """When an evaluation the cadence makes due may start, shared by the one-machine checkpoint saver
    and the validation listener so that a checkpoint is saved for an evaluation only when that
    evaluation will run. An exact cadence never waits. Under the auto cadence, after an evaluation of E
    seconds the next waits until `clock()` has advanced AUTO_TRAINING_FACTOR x E seconds, and is left out
    when less training than that is left before `max_steps` (at the rate of the steps since the last),
    whose evaluation comes anyway; the first of a run does not wait."""

    def __init__(self, cadence, max_steps=None, clock=time.perf_counter):
        self.cadence, self.clock, self.max_steps = cadence, clock, max_steps
        self._last_step, self._last_seconds, self._last_end = 0, None, None

    def allows(self, step):
        """Returns whether an evaluation of `step` may start now."""
        if not self.cadence.auto or self._last_seconds is None:
            return True
        least, trained = AUTO_TRAINING_FACTOR * self._last_seconds, self.clock() - self._last_end
        left = trained / (step - self._last_step) * (self.max_steps - step) if self.max_steps else least
        return trained >= least and left >= least

    def evaluated(self, step, started, ended):
        """Records an evaluation of `step` that ran from clock time `started` to `ended`."""
        self._last_step, self._last_seconds, self._last_end = step, ended - started, ended

    def checkpoint_due(self, step, last_saved):
        """Returns whether the checkpoint saver should save at `step` for an evaluation (it saved last at
        `last_saved`): where the cadence makes one due, and under the auto cadence only at the steps that
        end an epoch while an evaluation may start, not at every epoch's end."""
        if not self.cadence.auto:
            return self.cadence.due(step, last_saved)
        return self.cadence.due(step, step - 1) and self.allows(step)


def cadence_for(settings, steps, num_train_examples):
    """Returns the Cadence --eval-every-steps or --eval-every-epochs asks for, exactly; without either,
    the auto cadence (every epoch, held back to keep evaluation at most 5% of training). `steps` is the
    run's pipeline.training_record.Plan."""
    def images_at(step):
        return steps.images_at_start + (step - steps.start_step) * steps.global_batch
    if settings.eval_every_steps:
        return Cadence(settings.eval_every_steps, None, images_at)
    epochs = settings.eval_every_epochs or 1.0
    return Cadence(None, max(1, round(epochs * num_train_examples)), images_at,
                   auto=settings.eval_every_epochs is None, epochs=epochs)
