"""Evaluation as training goes: the validation split evaluated at a cadence (a saving listener, so the
training session and its graph stay up), the best checkpoint kept out of --keep-checkpoints' rotation
and exported at once, and early stopping.

A model dir's record is validation.json: every evaluation ({step, validation_accuracy,
validation_loss}) and the best ({step, validation_accuracy, validation_loss, checkpoint, export_dir}).
It is written after the best checkpoint's copy and export are whole, so a run killed at any point
leaves the recorded best intact, and a resumed run compares with it: a worse model never replaces it.
"""
import dataclasses
import json
import logging
import math
import os
import time
from typing import Callable, Optional

import tensorflow as tf

from acquisition import faults, storage
from acquisition.files import write_json_atomically
from pipeline.errors import FlagError, UsageError

log = logging.getLogger(__name__)
VALIDATION_FILE = "validation.json"
BEST_DIR = "best"  # the best checkpoint's copy, beside the rotating ones
BEST_EXPORT_DIR = "export"  # where the export of a run without validation goes: predict.py finds it the same way
EVAL_NAME = "validation"  # TensorBoard: <model dir>/eval_validation, beside the training curves
# The default cadence waits, after an evaluation of E seconds, for AUTO_TRAINING_FACTOR x E seconds of
# training before the next: evaluation then takes at most 1/(1 + 19) = 5% of each stretch of training.
AUTO_TRAINING_FACTOR = 19


@dataclasses.dataclass
class Cadence:
    """When an evaluation is due: every `every_steps` global steps, or each time another
    `every_images` images have been trained (images counted from `images_at(step)`). With `auto`
    (the default cadence), an evaluation also waits for AUTO_TRAINING_FACTOR times the last one's
    seconds of training since it ended (see ValidationListener)."""
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


def cadence_for(args, setup):
    """Returns the Cadence --eval-every-steps or --eval-every-epochs asks for, exactly; without either,
    the auto cadence (every epoch, held back to keep evaluation at most 5% of training)."""
    steps = setup.steps

    def images_at(step):
        return steps.images_at_start + (step - steps.start_step) * steps.global_batch
    if args.eval_every_steps:
        return Cadence(args.eval_every_steps, None, images_at)
    epochs = args.eval_every_epochs or 1.0
    return Cadence(None, max(1, round(epochs * setup.data.num_train_examples)), images_at,
                   auto=args.eval_every_epochs is None, epochs=epochs)


def check_validation_split(args, data):
    """Raises FlagError (exit 2) when the command line asks for a validation split the data, `data`
    (TaskData), does not hold: --validation-fraction above 0 given, or --validation-dir, of --synthetic
    data (the default share is left off without a word); or a cadence (--eval-every-steps,
    --eval-every-epochs) with no split to evaluate."""
    if data.validation_input_fn is not None:
        return
    if data.source == "synthetic":
        asked = None
        if args.validation_dir:
            asked = f"--validation-dir {args.validation_dir} validates on real images"
        elif args.validation_fraction and "validation_fraction" in getattr(args, "explicit_flags", ()):
            asked = f"--validation-fraction {args.validation_fraction:g} holds out a share of the training data"
        if asked:
            raise FlagError(f"{asked}, and --synthetic data (one generated batch repeated) has no validation split; "
                            "drop --synthetic to validate, or pass --validation-fraction 0")
    cadence = [flag for flag, value in (("--eval-every-steps", args.eval_every_steps),
                                        ("--eval-every-epochs", args.eval_every_epochs)) if value]
    if cadence:
        raise FlagError(f"{cadence[0]} sets how often the validation split is evaluated, and this run has none "
                        "(--validation-fraction 0, --synthetic data or prepared shards); drop it")


def check_early_stopping(args, data):
    """Raises FlagError (exit 2) for early-stopping flags that cannot act: no validation split to watch,
    or --min-delta without --patience."""
    asked = [flag for flag, value in (("--stop-at-accuracy", args.stop_at_accuracy), ("--patience", args.patience))
             if value is not None]
    if asked and data.validation_input_fn is None:
        synthetic = data.source == "synthetic"  # which holds no split to hold out (validation_flags)
        raise FlagError(f"{' and '.join(asked)} stop training on the validation split's accuracy, and "
                        f"{'--synthetic data has' if synthetic else 'this run has'} no validation split; drop them"
                        f"{'' if synthetic else ', or hold out a split (--validation-fraction above 0)'}")
    if "min_delta" in args.explicit_flags and not args.patience:
        raise FlagError("--min-delta is the least improvement --patience counts; give --patience N with it")


def read_record(model_dir):
    """Returns the model dir's validation record ({'evaluations': [...], 'best': {...} or None})."""
    path = storage.join(model_dir, VALIDATION_FILE)
    try:
        record = json.loads(storage.read_text(path))
        return {"evaluations": list(record["evaluations"]), "best": record.get("best")}
    except FileNotFoundError:
        return {"evaluations": [], "best": None}
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise UsageError(f"cannot read {path} ({getattr(e, 'strerror', None) or e}); it records the best model "
                         "so far: restore it, or pass another --model-dir") from None


def improvements_ago(evaluations, min_delta=0.0):
    """Returns how many evaluations came after the last one that improved on the validation accuracy
    early stopping watches by more than `min_delta` (0: any rise; a tie, whatever its loss, is no
    improvement), as Keras' EarlyStopping counts `wait`: the first evaluation sets the reference, and
    each improvement moves it to its own accuracy."""
    reference, since = None, 0
    for evaluation in evaluations:
        if reference is None or evaluation["validation_accuracy"] - min_delta > reference:
            reference, since = evaluation["validation_accuracy"], 0
        else:
            since += 1
    return since


def better(evaluation, best):
    """Returns whether `evaluation` beats `best` (None: nothing yet): higher validation accuracy, or
    the same accuracy at a lower validation loss."""
    if best is None:
        return True
    return (evaluation["validation_accuracy"], -evaluation["validation_loss"]) > \
        (best["validation_accuracy"], -best["validation_loss"])


class ValidationListener(tf.estimator.CheckpointSaverListener):
    """Evaluates the checkpoints the cadence makes due on the whole validation split, keeps and exports
    the best, and asks training to stop at --stop-at-accuracy or after --patience evaluations without a
    rise in validation accuracy of more than `min_delta` (the one training session stops: every replica
    at the same step). A run killed between a checkpoint and its evaluation lost that evaluation: the
    next run makes it first (catch_up). The stop is read from the record, so a run resumed after it
    (killed during the test evaluation, say) trains no further under the same flags.

    `export(checkpoint_path)` exports a checkpoint and returns the export's path (None: no export).
    Under an auto cadence a due evaluation waits until `clock()` has advanced AUTO_TRAINING_FACTOR
    times the last evaluation's seconds since it ended, and is left out when less training than that
    is left before `max_steps`, whose evaluation comes anyway; the first of a run and the final one
    do not wait.
    After training, `record` holds the evaluations and the best, `stopped_because` is
    'target_accuracy', 'patience' or None, and `seconds` the time spent evaluating and exporting.
    """

    def __init__(self, estimator, input_fn, cadence, model_dir, start_step, export=None, stop_at_accuracy=None,
                 patience=None, stop_requested=lambda: False, clock=time.perf_counter, max_steps=None,
                 min_delta=0.0):
        self._estimator, self._input_fn, self._cadence = estimator, input_fn, cadence
        self._model_dir, self._export = model_dir, export
        self._stop_at, self._patience, self._stop_requested = stop_at_accuracy, patience, stop_requested
        self._min_delta = min_delta
        self.record = read_record(model_dir)
        # Evaluations past the newest checkpoint belong to checkpoints a failed run lost.
        evaluations = self.record["evaluations"] = [e for e in self.record["evaluations"] if e["step"] <= start_step]
        self._last_step = evaluations[-1]["step"] if evaluations else 0
        # A run that stopped early at its newest checkpoint, then was killed before it finished its report.
        self.stopped_because = self._stop_reason() if self._last_step == start_step and evaluations else None
        self.seconds = 0.0
        self._clock, self._last_seconds, self._last_end, self._max_steps = clock, None, None, max_steps

    @property
    def early_stopping(self):
        """Returns the early-stopping rule applied ({'monitor', 'stop_at_accuracy', 'patience', 'min_delta'})."""
        return {"monitor": "validation_accuracy", "stop_at_accuracy": self._stop_at, "patience": self._patience,
                "min_delta": self._min_delta if self._patience else None}

    @property
    def last_evaluated_step(self):
        """Returns the global step of the last evaluation recorded or made (0: none)."""
        return self._last_step

    def due(self, step):
        """Returns whether the cadence makes a checkpoint of global `step` due for evaluation."""
        return step > self._last_step and self._cadence.due(step, self._last_step)

    def after_save(self, session, global_step_value):
        step = int(global_step_value)
        if self.due(step) and not self._stop_requested() and self._trained_long_enough(step):
            return self.evaluate(step)
        return False

    def _trained_long_enough(self, step):
        """Returns whether the auto cadence lets an evaluation of `step` start now (always, for the
        others): enough training since the last, and enough left before the final step's, at the rate
        of the steps since the last."""
        if not self._cadence.auto or self._last_seconds is None:
            return True
        least, trained = AUTO_TRAINING_FACTOR * self._last_seconds, self._clock() - self._last_end
        left = trained / (step - self._last_step) * (self._max_steps - step) if self._max_steps else least
        return trained >= least and left >= least

    def catch_up(self, step):
        """Evaluates the checkpoint of `step`, the newest when a run starts, when it is due (or the final
        one) and no evaluation of it was recorded; returns whether training should stop."""
        final = self._max_steps is not None and step >= self._max_steps
        if step and self.stopped_because is None and (self.due(step) or (final and step > self._last_step)):
            log.info("validating the checkpoint of step %d first: the run that wrote it ended before its "
                     "evaluation", step)
            self.evaluate(step)
        return self.stopped_because is not None

    def end(self, session, global_step_value):
        step = int(global_step_value)
        if step > self._last_step and not self._stop_requested() and self.stopped_because is None:
            self.evaluate(step)

    def evaluate(self, step):
        """Evaluates the checkpoint of `step` and keeps it when best; returns whether training should stop."""
        start = self._clock()
        self._last_step = step
        checkpoint = storage.join(self._model_dir, f"model.ckpt-{step}")
        faults.point("validation")
        metrics = self._estimator.evaluate(self._input_fn, checkpoint_path=checkpoint, name=EVAL_NAME)
        evaluation = {"step": step, "validation_accuracy": float(metrics["accuracy"]),
                      "validation_loss": float(metrics["loss"])}
        self.record["evaluations"].append(evaluation)
        improved = better(evaluation, self.record["best"])
        if improved:
            self.record["best"] = self._keep(evaluation, checkpoint)
        self._write()
        best = self.record["best"]
        log.info("validation at step %d: accuracy %.4f, loss %.4f; best %.4f at step %d%s", step,
                 evaluation["validation_accuracy"], evaluation["validation_loss"], best["validation_accuracy"],
                 best["step"], " (new best, exported)" if improved and best.get("export_dir") else "")
        self._last_end = self._clock()
        self._last_seconds = self._last_end - start
        self.seconds += self._last_seconds
        self.stopped_because = self._stop_reason()
        if self.stopped_because:
            log.info("stopping at step %d: %s", step, "validation accuracy reached --stop-at-accuracy "
                     f"{self._stop_at:g}" if self.stopped_because == "target_accuracy" else
                     f"{self._patience} evaluations without a rise in validation accuracy above "
                     f"{self._min_delta:g} (--patience, --min-delta)")
        return self.stopped_because is not None

    def _stop_reason(self):
        """Returns why the record's last evaluation stops training ('target_accuracy', 'patience'), or None."""
        evaluations = self.record["evaluations"]
        if self._stop_at is not None and evaluations[-1]["validation_accuracy"] >= self._stop_at:
            return "target_accuracy"
        if self._patience and self.evaluations_without_improvement() >= self._patience:
            return "patience"
        return None

    def evaluations_without_improvement(self):
        """Returns how many evaluations came after the last one that raised validation accuracy by more
        than --min-delta (see improvements_ago)."""
        return improvements_ago(self.record["evaluations"], self._min_delta)

    def _keep(self, evaluation, checkpoint):
        """Copies `checkpoint` to <model dir>/best and exports it; returns the new best's record."""
        best_dir = storage.join(self._model_dir, BEST_DIR)
        storage.makedirs(best_dir)
        name = os.path.basename(checkpoint)
        for file in storage.listdir(self._model_dir):
            if file.startswith(name + "."):
                storage.copy_file(storage.join(self._model_dir, file), storage.join(best_dir, file + ".tmp"))
                storage.rename(storage.join(best_dir, file + ".tmp"), storage.join(best_dir, file))
                faults.point("best_copy")
        kept = storage.join(best_dir, name)
        faults.point("best_export")
        export_dir = self._export(kept) if self._export else None
        return {**evaluation, "checkpoint": storage.absolute(kept), "export_dir": export_dir}

    def _write(self):
        write_json_atomically(storage.join(self._model_dir, VALIDATION_FILE), self.record)
        remove_superseded(self._model_dir, self.record["best"])


def remove_superseded(model_dir, best):
    """Removes the best checkpoints and exports that `best` (validation.json's) replaced, and those of
    a run killed before it recorded them."""
    if best is None:
        return
    keep = os.path.basename(best["checkpoint"])
    for path in storage.glob(storage.join(model_dir, BEST_DIR, "*")):
        if not os.path.basename(path).startswith(keep + "."):
            storage.remove(path)
    for path in storage.glob(storage.join(model_dir, BEST_EXPORT_DIR, "[0-9]*")):  # not an export being written
        if best.get("export_dir") and storage.absolute(path) != best["export_dir"]:
            storage.remove_tree(path)
