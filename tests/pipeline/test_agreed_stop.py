"""The stop record a cluster's chief writes and every trainer reads (pipeline.validation.agreed_stop), without a
cluster: the chief's side between steps, the trainers' reader, the evaluator's end, the peer watches'
end of training."""
import collections
import json

from pipeline.validation import agreed_stop
from pipeline.validation.early_stopping import EarlyStopping
from pipeline.validation.record import write_record
from pipeline.cluster_run import training_finished
from pipeline.training_record import PROGRESS_FILE


class FakeListener:
    """A ValidationListener's due/after_save/stopped_because: due every 10 steps, asks to stop at `stop_at`."""

    def __init__(self, stop_at=None):
        self.saved, self.last, self.stop_at, self.stopped_because = [], 0, stop_at, None

    @property
    def last_evaluated_step(self):
        return self.last

    def due(self, step):
        return step // 10 > self.last // 10

    def after_save(self, session, step):
        self.saved.append(step)
        self.last = step
        if step == self.stop_at:
            self.stopped_because = "target_accuracy"
        return self.stopped_because is not None


def write_checkpoint(model_dir, step):
    """Writes checkpoint `step`'s index and names it the newest."""
    (model_dir / f"model.ckpt-{step}.index").write_bytes(b"")
    (model_dir / "checkpoint").write_text(f'model_checkpoint_path: "model.ckpt-{step}"\n')


def record_final_step(model_dir, max_steps):
    """Writes the progress record of a run training to `max_steps`, as the chief does before training."""
    (model_dir / PROGRESS_FILE).write_text(json.dumps({"task": "fashion", "runs": [
        {"start_step": 0, "images_at_start": 0, "global_batch": 32, "max_steps": max_steps}]}))


def test_the_chief_evaluates_each_due_checkpoint_once_and_records_the_stop_after_the_next_step(tmp_path):
    listener = FakeListener(stop_at=20)
    validate = agreed_stop.ChiefValidation(listener, str(tmp_path), start_step=0)
    reader = agreed_stop.StopStepReader(str(tmp_path))
    for step in range(0, 12):  # checkpoints every 10 steps, as the saver writes them
        if step % 10 == 0:
            write_checkpoint(tmp_path, step)
        validate(step)
    assert listener.saved == [10] and reader() is None
    write_checkpoint(tmp_path, 17)  # under parameter_server the chief sees the global step jump past it
    validate(19)
    assert listener.saved == [10]  # 17 is not due yet: nothing evaluated
    write_checkpoint(tmp_path, 20)
    validate(23)  # jumped from 19 to 23: the checkpoint of 20 in between is found
    assert listener.saved == [10, 20]
    assert agreed_stop.read_stop(str(tmp_path)) == {"stop_after_step": 24, "because": "target_accuracy"}
    assert reader() == 24
    write_checkpoint(tmp_path, 30)
    validate(30)
    assert listener.saved == [10, 20]  # nothing more once the stop is agreed


def test_a_due_step_without_its_checkpoint_waits_for_the_next_checkpoint(tmp_path):
    listener = FakeListener()
    validate = agreed_stop.ChiefValidation(listener, str(tmp_path), start_step=5)
    validate(5)  # the session's first call, at the resumed step: nothing to evaluate
    validate(10)
    validate(11)
    write_checkpoint(tmp_path, 12)  # checkpoints every 4 steps from 0: 10 had none
    validate(12)
    assert listener.saved == [12] and agreed_stop.read_stop(str(tmp_path)) is None


def test_a_resumed_chief_evaluates_the_due_checkpoint_its_killed_run_did_not(tmp_path):
    listener = FakeListener()
    listener.last = 10  # the record's last evaluation; the run was killed after the checkpoint of 20
    write_checkpoint(tmp_path, 20)
    validate = agreed_stop.ChiefValidation(listener, str(tmp_path), start_step=20)
    validate(21)  # the first step of the resumed run
    assert listener.saved == [20]


def test_a_reader_keeps_the_step_once_read_and_an_earlier_runs_record_is_removed(tmp_path):
    reader = agreed_stop.StopStepReader(str(tmp_path))
    assert reader() is None
    agreed_stop.record_stop(str(tmp_path), 41, "patience")
    assert reader() == 41
    assert agreed_stop.remove_stop(str(tmp_path)) and not agreed_stop.remove_stop(str(tmp_path))
    assert reader() == 41 and agreed_stop.StopStepReader(str(tmp_path))() is None
    (tmp_path / agreed_stop.STOP_FILE).write_text("{not json")
    assert agreed_stop.read_stop(str(tmp_path)) is None


Result = collections.namedtuple("Result", "status metrics checkpoint_path")


def test_the_evaluator_ends_after_evaluating_the_checkpoint_of_the_stop(tmp_path):
    listener = agreed_stop._EndsAtAgreedStop(str(tmp_path), EarlyStopping())  # noqa: SLF001
    evaluated = lambda step: Result("evaluated", {"global_step": step}, f"model.ckpt-{step}")  # noqa: E731
    assert listener.after_eval(evaluated(30))
    agreed_stop.record_stop(str(tmp_path), 41, "target_accuracy")
    assert listener.after_eval(evaluated(40))  # written before the stop's step: evaluate on
    assert listener.after_eval(Result("no_new_checkpoint", None, None))
    assert not listener.after_eval(evaluated(41))


def test_training_is_finished_once_the_newest_checkpoint_reaches_the_agreed_stop(tmp_path):
    record_final_step(tmp_path, 400)
    write_checkpoint(tmp_path, 40)
    agreed_stop.record_stop(str(tmp_path), 41, "target_accuracy")
    assert not training_finished(str(tmp_path)) and not training_finished(str(tmp_path), max_steps=400)
    write_checkpoint(tmp_path, 41)
    assert training_finished(str(tmp_path)) and training_finished(str(tmp_path), max_steps=400)


def test_an_earlier_runs_record_is_set_aside_until_this_run_has_trained_on(tmp_path):
    # A run stopped early after step 41, resumed with more epochs: a parameter server, the evaluator and
    # the peer watches start before the new chief has removed the old record.
    record_final_step(tmp_path, 400)
    write_checkpoint(tmp_path, 41)
    agreed_stop.record_stop(str(tmp_path), 41, "target_accuracy")
    current_stop = agreed_stop.CurrentStop(str(tmp_path))
    evaluator = agreed_stop._EndsAtAgreedStop(str(tmp_path), EarlyStopping())  # noqa: SLF001
    assert current_stop() is None
    assert training_finished(str(tmp_path))  # read as it is, the old record says training has ended
    assert not training_finished(str(tmp_path), current_stop=current_stop)  # a lost trainer: restart, not exit 0
    assert evaluator.after_eval(Result("evaluated", {"global_step": 41}, "model.ckpt-41"))  # evaluate on
    # The new run trains on and stops again: its record counts.
    write_checkpoint(tmp_path, 60)
    agreed_stop.record_stop(str(tmp_path), 61, "target_accuracy")
    assert current_stop() == {"stop_after_step": 61, "because": "target_accuracy"}
    write_checkpoint(tmp_path, 61)
    assert training_finished(str(tmp_path), current_stop=current_stop)
    assert not evaluator.after_eval(Result("evaluated", {"global_step": 61}, "model.ckpt-61"))


def test_a_record_written_after_the_task_started_counts_at_once(tmp_path):
    write_checkpoint(tmp_path, 30)
    current_stop = agreed_stop.CurrentStop(str(tmp_path))
    agreed_stop.record_stop(str(tmp_path), 30, "patience")
    assert current_stop() == {"stop_after_step": 30, "because": "patience"}


def stopped_early_at_41(model_dir):
    """Writes what a cluster's training that stopped early after step 41 leaves: the evaluations (the one of step
    40 reached accuracy 0.25), the stop record and the final checkpoint."""
    record_final_step(model_dir, 400)
    write_record(str(model_dir), {"evaluations": [{"step": 20, "validation_accuracy": 0.1, "validation_loss": 2.0},
                                                  {"step": 40, "validation_accuracy": 0.25, "validation_loss": 1.8}],
                                  "best": None})
    agreed_stop.record_stop(str(model_dir), 41, "target_accuracy")
    write_checkpoint(model_dir, 41)


def test_a_stop_is_honoured_where_its_step_was_reached_and_this_run_s_rule_stops_there_too(tmp_path):
    """A relaunched chief removed the record of its own run's early stop and trained on past it."""
    stopped_early_at_41(tmp_path)
    record = {"stop_after_step": 41, "because": "target_accuracy"}
    assert agreed_stop.honoured_stop(str(tmp_path), 41, EarlyStopping(stop_at_accuracy=0.2)) == record
    assert agreed_stop.honoured_stop(str(tmp_path), 41, EarlyStopping(stop_at_accuracy=0.3)) is None  # stricter
    assert agreed_stop.honoured_stop(str(tmp_path), 41, EarlyStopping(patience=1)) is None  # another rule
    assert agreed_stop.honoured_stop(str(tmp_path), 41, EarlyStopping()) is None
    # The chief killed between the record and its next step: the newest checkpoint is the one evaluated last.
    assert agreed_stop.honoured_stop(str(tmp_path), 40, EarlyStopping(stop_at_accuracy=0.2)) == {
        "stop_after_step": 40, "because": "target_accuracy"}
    assert agreed_stop.honoured_stop(str(tmp_path), 39, EarlyStopping(stop_at_accuracy=0.2)) is None  # not reached
    # Another rule that stops there too: its reason, as a resumed run on one machine takes a stricter rule's.
    agreed_stop.record_stop(str(tmp_path), 41, "patience")
    assert agreed_stop.honoured_stop(str(tmp_path), 41, EarlyStopping(stop_at_accuracy=0.2)) == record
    # A validation record of another shape is no stop, not a traceback in every task.
    (tmp_path / "validation.json").write_text('{"evaluations": [{"step": 40}], "best": null}')
    assert agreed_stop.honoured_stop(str(tmp_path), 41, EarlyStopping(stop_at_accuracy=0.2)) is None


def test_an_evaluator_restarted_after_the_stop_ends_and_the_watches_take_training_as_finished(tmp_path):
    """Restarted while the chief wrote its report, the evaluator took the record for an earlier run's and evaluated
    on for ever; a relaunched ps or peer watch took training as going on."""
    stopped_early_at_41(tmp_path)
    rule = EarlyStopping(stop_at_accuracy=0.2)
    evaluator = agreed_stop._EndsAtAgreedStop(str(tmp_path), rule)  # noqa: SLF001
    assert not evaluator.after_eval(Result("evaluated", {"global_step": 41}, "model.ckpt-41"))
    assert training_finished(str(tmp_path), current_stop=agreed_stop.CurrentStop(str(tmp_path), rule))
    # Under a stricter rule the run trains on: the record is an earlier run's until then.
    stricter = EarlyStopping(stop_at_accuracy=0.3)
    assert agreed_stop._EndsAtAgreedStop(str(tmp_path), stricter).after_eval(  # noqa: SLF001
        Result("evaluated", {"global_step": 41}, "model.ckpt-41"))
    assert not training_finished(str(tmp_path), current_stop=agreed_stop.CurrentStop(str(tmp_path), stricter))
