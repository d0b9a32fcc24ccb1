"""The validation listener: a saving listener that evaluates the checkpoints the cadence makes due on
the whole validation split (so the training session and its graph stay up) and records each
evaluation; a new best goes to a BestKeeper (best.py), and early stopping reads the record
(early_stopping.py)."""
import logging

import tensorflow as tf

from acquisition import faults, storage
from hooks.scores import ScoreCollectorHook
from pipeline.metrics import CROSS_ENTROPY
from pipeline.validation.best import BestKeeper
from pipeline.validation.early_stopping import EarlyStopping, early_stopping_of
from pipeline.validation.record import better, read_record, write_record

log = logging.getLogger(__name__)
EVAL_NAME = "validation"  # TensorBoard: <model dir>/eval_validation, beside the training curves


class ValidationListener(tf.estimator.CheckpointSaverListener):
    """Evaluates the checkpoints `pacing`'s cadence makes due, records each in validation.json, hands a new best
    to `keeper` (a BestKeeper, which copies and exports it) and asks training to stop when
    `early_stopping` (an EarlyStopping) says so: the one training session stops, every replica at the
    same step. A run killed between a checkpoint and its evaluation lost that evaluation: the next run
    makes it first (catch_up). The stop is read from the record, so a run resumed after it (killed
    during the test evaluation, say) trains no further under the same flags.

    A due evaluation starts when `pacing` (a pipeline.validation.cadence.Pacing, which also holds the
    run's max_steps) allows it: under the auto cadence it waits after the last one, or is left to the
    final step's, which never waits. After training, `record` holds the evaluations and the best, `stopped_because` is
    'target_accuracy', 'patience' or None, and `seconds` the time spent evaluating and exporting.
    When `keeper` keeps scores, each image's scores of a new best's evaluation are kept beside it, for the
    report.
    """

    def __init__(self, estimator, input_fn, pacing, model_dir, start_step, keeper,
                 early_stopping=EarlyStopping(), stop_requested=lambda: False):
        self._estimator, self._input_fn, self._pacing = estimator, input_fn, pacing
        self._model_dir, self._keeper, self.early_stopping = model_dir, keeper, early_stopping
        self._stop_requested = stop_requested
        self.record = read_record(model_dir)
        evaluations = self.record["evaluations"] = _evaluations_up_to(self.record, start_step)
        self._last_step = evaluations[-1]["step"] if evaluations else 0
        # A run that stopped early at its newest checkpoint, then was killed before it finished its report.
        self.stopped_because = stopped_early(self.record, start_step, early_stopping)
        self.seconds = 0.0

    @property
    def last_evaluated_step(self):
        """Returns the global step of the last evaluation recorded or made (0: none)."""
        return self._last_step

    def due(self, step):
        """Returns whether the cadence makes a checkpoint of global `step` due for evaluation."""
        return step > self._last_step and self._pacing.cadence.due(step, self._last_step)

    def after_save(self, session, global_step_value):
        step = int(global_step_value)
        if self.due(step) and not self._stop_requested() and self._pacing.allows(step):
            return self.evaluate(step)
        return False

    def catch_up(self, step):
        """Evaluates the checkpoint of `step`, the newest when a run starts, when it is due (or the final
        one) and no evaluation of it was recorded; returns whether training should stop."""
        final = self._pacing.max_steps is not None and step >= self._pacing.max_steps
        if step and self.stopped_because is None and (self.due(step) or (final and step > self._last_step)):
            # (Killed between the checkpoint and its evaluation, or under the auto cadence past an epoch's end whose
            # evaluation the time throttle had put off: the throttle starts again with a run.)
            log.info("validating the checkpoint of step %d first: the cadence makes it due, and no evaluation of it "
                     "was recorded", step)
            self.evaluate(step)
        elif self.stopped_because:  # the record's evaluations, read under this run's rule
            log.info("not training past step %d: its evaluations already meet the early-stopping rule, %s", step,
                     self.early_stopping.describe_stop(self.stopped_because))
        return self.stopped_because is not None

    def stopped_by_record(self, step, because):
        """Takes training as stopped early at global `step` for `because`, as a cluster's stop record says (its
        chief evaluated the step before and stopped after the next: see agreed_stop.honoured_stop)."""
        self.stopped_because = because
        log.info("not training past step %d: the cluster's training stopped early there (%s)", step,
                 self.early_stopping.describe_stop(because))

    def end(self, session, global_step_value):
        step = int(global_step_value)
        if step > self._last_step and not self._stop_requested() and self.stopped_because is None:
            self.evaluate(step)

    def evaluate(self, step):
        """Evaluates the checkpoint of `step` and keeps it when best; returns whether training should stop."""
        start = self._pacing.clock()
        self._last_step = step
        checkpoint = storage.join(self._model_dir, f"model.ckpt-{step}")
        faults.point("validation")
        scores = ScoreCollectorHook() if self._keeper.keeps_scores else None
        metrics = self._estimator.evaluate(self._input_fn, checkpoint_path=checkpoint, name=EVAL_NAME,
                                           hooks=[scores] if scores else None)
        evaluation = {"step": step, "validation_accuracy": float(metrics["accuracy"]),
                      "validation_loss": float(metrics[CROSS_ENTROPY])}
        self.record["evaluations"].append(evaluation)
        improved = better(evaluation, self.record["best"])
        if improved:
            self.record["best"] = self._keeper.keep(evaluation, checkpoint, scores)
        write_record(self._model_dir, self.record)
        self._keeper.remove_superseded(self.record["best"])
        self._log(evaluation, improved)
        end = self._pacing.clock()
        self._pacing.evaluated(step, start, end)
        self.seconds += end - start
        self.stopped_because = self.early_stopping.reason(self.record["evaluations"])
        if self.stopped_because:
            log.info("stopping at step %d: %s", step, self.early_stopping.describe_stop(self.stopped_because))
        return self.stopped_because is not None

    def _log(self, evaluation, improved):
        best = self.record["best"]
        log.info("validation at step %d: accuracy %.4f, loss %.4f; best %.4f at step %d%s", evaluation["step"],
                 evaluation["validation_accuracy"], evaluation["validation_loss"], best["validation_accuracy"],
                 best["step"], " (new best, exported)" if improved and best.get("export_dir") else "")


def _evaluations_up_to(record, step):
    # Evaluations past the newest checkpoint belong to checkpoints a failed run lost.
    return [e for e in record["evaluations"] if e["step"] <= step]


def stopped_early(record, step, early_stopping):
    """Returns why the validation `record`'s evaluations stop training at global `step` under the rule
    `early_stopping` ('target_accuracy', 'patience'), or None: not unless `step` (the newest checkpoint's)
    was evaluated last."""
    evaluations = _evaluations_up_to(record, step)
    return early_stopping.reason(evaluations) if evaluations and evaluations[-1]["step"] == step else None


def build_validation(setup, estimator, pacing, stop_requested, export=None, scores_made_with=None):
    """Returns the ValidationListener of `setup` (a RunSetup with a validation split) evaluating when
    `pacing` (a Pacing of the cadence) allows until `stop_requested()`: the best kept in <model dir>/best
    (with its validation's scores, when `scores_made_with` says what they depend on) and exported with
    `export(checkpoint)` (None: not exported), early stopping as the settings say."""
    settings = setup.settings
    return ValidationListener(
        estimator, setup.data.validation_input_fn, pacing, settings.model_dir, setup.start_step,
        BestKeeper(settings.model_dir, export, scores_made_with),
        early_stopping_of(settings), stop_requested=stop_requested)
