"""Early stopping in a TF_CONFIG cluster: the chief validates inside training and, to stop, writes a
stop record that every training task reads between its steps, so that all of them end after the same
step and none waits in a collective for a task that has gone.

Under multi_worker_mirrored every step is an all-reduce over all trainers. The chief evaluates the
checkpoint of step S before it runs step S+1, while the workers already wait in step S+1's all-reduce;
when it decides to stop it writes <model dir>/stop.json {"stop_after_step": S+1, "because": ...}
before running step S+1. No worker can finish step S+1 before the chief joins it, so every worker
reads the record right after step S+1 and stops there, as the chief does. Under parameter_server the
workers train asynchronously: each stops after its first step that ends at or past the recorded step.

The chief removes a record left by an earlier run before training starts (no trainer can finish a
step before the chief's session exists: the all-reduce needs it, parameter-server workers wait for
its variables), so a stale record never stops a resumed run. An evaluator task ends after it has
evaluated the checkpoint of the stop (evaluate_until_training_ends), and the peer watches take
training as finished once the newest checkpoint has reached it (pipeline.cluster_run). Those two
may look before the chief has removed an earlier run's record: they read it through CurrentStop,
which sets aside a record that was there when the task started until training has gone on.
"""
import functools
import json
import logging

import tensorflow as tf
from tensorflow.python.distribute import estimator_training as coordinator
from tensorflow_estimator.python.estimator import training as training_lib

from acquisition import storage
from acquisition.files import write_json_atomically
from pipeline import model_dir as model_dir_lib
from pipeline.errors import UsageError
from pipeline.validation.record import read_record

log = logging.getLogger(__name__)
STOP_FILE = "stop.json"


def stop_path(model_dir):
    return storage.join(model_dir, STOP_FILE)


def record_stop(model_dir, stop_after_step, because):
    """Writes the stop record (atomically): every trainer stops after its first step ending at or past
    `stop_after_step`; returns its path."""
    return write_json_atomically(stop_path(model_dir), {"stop_after_step": int(stop_after_step), "because": because})


def read_stop(model_dir):
    """Returns the stop record's dict, or None when there is none (or it cannot be read: a record is
    written whole by a rename, so a partial one is never seen)."""
    try:
        record = json.loads(storage.read_text(stop_path(model_dir)))
        return {"stop_after_step": int(record["stop_after_step"]), "because": str(record["because"])}
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def remove_stop(model_dir):
    """Removes an earlier run's stop record (the chief, before training); returns whether there was one."""
    path = stop_path(model_dir)
    if not storage.exists(path):
        return False
    storage.remove(path)
    return True


def honoured_stop(model_dir, newest_step, early_stopping):
    """Returns {'stop_after_step', 'because'} when a cluster's training stopped early at its newest checkpoint
    (`newest_step`) under this run's rule `early_stopping` (an EarlyStopping), else None. There is a stop record,
    the newest checkpoint has reached its step (or is the one evaluated last: the chief was killed between the
    record and its next step), and the validation record's evaluations up to it stop training under the rule, for
    the reason given now (a stricter rule's too, as one machine's run takes it). Every task of a relaunch decides
    alike from the same files and flags: the chief then writes the report alone (or reprints it) and nobody trains;
    else the record is an earlier run's, resumed under another rule, which the chief removes."""
    record = read_stop(model_dir)
    if record is None:
        return None
    try:
        evaluations = [e for e in read_record(model_dir)["evaluations"]
                       if e["step"] < record["stop_after_step"] and e["step"] <= newest_step]
        because = early_stopping.reason(evaluations)
    except (UsageError, KeyError, TypeError, ValueError):  # (a damaged validation record: the chief's checks name it)
        return None
    reached = newest_step >= record["stop_after_step"] or (evaluations and evaluations[-1]["step"] == newest_step)
    if not because or not reached:
        return None
    return {"stop_after_step": min(record["stop_after_step"], newest_step), "because": because}


class CurrentStop:
    """A callable returning this run's stop record (as read_stop), or None. A record that was already
    there when this object was made (at the task's start) belongs to an earlier run, early-stopped
    and now resumed, while no checkpoint newer than the newest one then has been written: the chief
    removes it before training, but a parameter server, an evaluator or a peer watch may look first
    (and would take training as finished at once, so that a lost trainer meant exit 0, not a restart).
    Unless it is `early_stopping`'s honoured_stop: then training has ended there (a relaunch after the
    stop, or an evaluator restarted after it), and it counts."""

    def __init__(self, model_dir, early_stopping=None):
        self._model_dir = model_dir
        newest = model_dir_lib.latest_global_step(model_dir)
        self._honoured = honoured_stop(model_dir, newest, early_stopping) if early_stopping is not None else None
        self._found_at_start = None if self._honoured else read_stop(model_dir)
        self._step_at_start = newest if self._found_at_start else None

    def __call__(self):
        if self._honoured is not None:  # nobody trains on
            return self._honoured
        record = read_stop(self._model_dir)
        if record is not None and record == self._found_at_start \
                and model_dir_lib.latest_global_step(self._model_dir) <= self._step_at_start:
            return None
        return record


class StopStepReader:
    """A callable for hooks.stop.StopAtAgreedStepHook: returns the agreed stop step, or None. Until
    a record appears it costs one failed open() per step; once read, it is kept."""

    def __init__(self, model_dir):
        self._model_dir, self._step = model_dir, None

    def __call__(self):
        if self._step is None:
            record = read_stop(self._model_dir)
            self._step = record and record["stop_after_step"]
        return self._step


def checkpoint_written(model_dir, step):
    """Returns whether the checkpoint of global `step` exists in `model_dir` (its index is written last)."""
    return storage.exists(storage.join(model_dir, f"model.ckpt-{step}.index"))


class ChiefValidation:
    """A callable for hooks.stop.BetweenStepsHook on the chief of a cluster: between two steps, with
    the global step the last one reached, hands the newest checkpoint written since the last call to
    `listener` (a pipeline.validation.ValidationListener) once the listener's cadence makes one due,
    and records the stop when the listener asks for one. (In a cluster the Estimator passes no
    saving listeners to the checkpoint saver: pipeline.roles.run_in_cluster.)"""

    def __init__(self, listener, model_dir, start_step):
        # From the listener's last evaluation: a due checkpoint a killed run did not evaluate is looked at too.
        self._listener, self._model_dir = listener, model_dir
        self._scanned = min(start_step, listener.last_evaluated_step)
        self.stop_after_step = None

    def __call__(self, step):
        if self.stop_after_step is not None or step <= self._scanned or not self._listener.due(step):
            return
        # Under parameter_server the global step jumps by other workers' steps: look at each since the last call.
        written = next((s for s in range(step, self._scanned, -1) if checkpoint_written(self._model_dir, s)), None)
        self._scanned = step
        if written is not None and self._listener.after_save(None, written):
            self.stop_after_step = step + 1
            record_stop(self._model_dir, self.stop_after_step, self._listener.stopped_because)


class _EndsAtAgreedStop(training_lib._ContinuousEvalListener):  # noqa: SLF001 - the listener TF's evaluator takes
    """Ends an evaluator's continuous evaluation once it has evaluated a checkpoint at or past the
    stop record's step (TensorFlow's own ends it at max_steps only); a record there at its start counts when
    it is `early_stopping`'s (see CurrentStop)."""

    def __init__(self, model_dir, early_stopping):
        self._current_stop, self._evaluated_step = CurrentStop(model_dir, early_stopping), None

    def after_eval(self, eval_result):
        if eval_result.status == training_lib._EvalStatus.EVALUATED:  # noqa: SLF001
            self._evaluated_step = int(eval_result.metrics[tf.compat.v1.GraphKeys.GLOBAL_STEP])
        record = self._current_stop()
        if record is not None and self._evaluated_step is not None \
                and self._evaluated_step >= record["stop_after_step"]:
            log.info("training stopped early after step %d (%s): the evaluator ends", record["stop_after_step"],
                     record["because"])
            return False
        return True


def evaluate_until_training_ends(estimator, train_spec, eval_spec, model_dir, early_stopping):
    """Runs an evaluator task as tf.estimator.train_and_evaluate does (each new checkpoint evaluated,
    until the one of --max-steps), but ends it too after the checkpoint of an agreed early stop (under
    `early_stopping`, the run's rule); returns None."""
    executor = functools.partial(training_lib._TrainingExecutor,  # noqa: SLF001 - TF 2.15's, frozen
                                 continuous_eval_listener=_EndsAtAgreedStop(model_dir, early_stopping))
    if coordinator.should_run_distribute_coordinator(estimator.config):
        coordinator.train_and_evaluate(estimator, train_spec, eval_spec, executor)
    else:
        executor(estimator, train_spec, eval_spec).run()
