"""Early stopping: what counts as an improvement (--min-delta), the stop read back from the record
after a kill, the validation a killed run never made, and the flags refused where nothing can stop."""
import types

import pytest

from pipeline.cli import train_main
from pipeline.validation import early_stopping
from pipeline.flags import build_parser
from pipeline.roles import run
from pipeline.tasks import fashion
from tests.conftest import assert_clean_failure
from tests.pipeline.test_validation import fake_checkpoint, listener, train_to


def test_a_flat_run_whose_loss_creeps_down_stops_after_patience(tmp_path):
    # The run: accuracy flat, each loss lower by a hair. Each was a new best; none is a rise.
    flat = [(0.4, 2.0 - i * 1e-6) for i in range(20)]
    watcher = listener(str(tmp_path), flat, patience=2)
    assert train_to(watcher, str(tmp_path), range(10, 200, 10)) == 30 and watcher.stopped_because == "patience"
    assert watcher.record["best"]["step"] == 30  # the kept model still takes the lower loss


def test_min_delta_counts_only_rises_above_it_as_keras_early_stopping_does(tmp_path):
    accuracies = [0.50, 0.505, 0.509, 0.515, 0.52, 0.521, 0.522]
    assert early_stopping.improvements_ago([{"validation_accuracy": a} for a in accuracies], 0.0) == 0
    # Reference 0.50; 0.515 rises by more than 0.01 and becomes the reference; nothing after does.
    assert early_stopping.improvements_ago([{"validation_accuracy": a} for a in accuracies], 0.01) == 3
    watcher = listener(str(tmp_path), [(a, 1.0) for a in accuracies], patience=3, min_delta=0.01)
    assert train_to(watcher, str(tmp_path), range(10, 100, 10)) == 70
    assert watcher.early_stopping.as_dict() == {"monitor": "validation_accuracy", "stop_at_accuracy": None, "patience": 3,
                                      "min_delta": 0.01}


def test_a_resumed_run_validates_the_due_checkpoint_its_killed_run_did_not(tmp_path):
    model_dir = str(tmp_path)
    first = listener(model_dir, [(0.5, 1.0), (0.6, 0.9)])
    train_to(first, model_dir, [5, 10, 15, 20])
    fake_checkpoint(model_dir, 25)
    fake_checkpoint(model_dir, 30)  # killed here, before the evaluation of 30 (due) started
    resumed = listener(model_dir, [(0.7, 0.8), (0.8, 0.7)], start_step=30, max_steps=50)
    assert resumed.last_evaluated_step == 20 and not resumed.catch_up(30)
    assert [e["step"] for e in resumed.record["evaluations"]] == [10, 20, 30]
    assert resumed.after_save(None, 30) is False  # the Estimator's save at the session's start: done already
    train_to(resumed, model_dir, [35, 40])
    assert [e["step"] for e in resumed.record["evaluations"]] == [10, 20, 30, 40]
    # A checkpoint that is not due is not evaluated, and the final one always is.
    assert not listener(model_dir, [], start_step=45, max_steps=50).catch_up(45)
    fake_checkpoint(model_dir, 45)
    last = listener(model_dir, [(0.1, 2.0)], start_step=45, max_steps=45)
    last.catch_up(45)
    assert [e["step"] for e in last.record["evaluations"]] == [10, 20, 30, 40, 45]


def test_a_run_that_stopped_early_and_was_killed_before_its_report_trains_no_further(tmp_path):
    model_dir = str(tmp_path)
    first = listener(model_dir, [(0.5, 1.0), (0.5, 0.9), (0.5, 0.8)], patience=2)
    assert train_to(first, model_dir, [10, 20, 30, 40]) == 30
    resumed = listener(model_dir, [], start_step=30, patience=2, max_steps=100)
    assert resumed.catch_up(30) and resumed.stopped_because == "patience"
    # With more patience the same model dir trains on.
    assert not listener(model_dir, [], start_step=30, patience=3, max_steps=100).catch_up(30)



def test_a_real_flat_run_stops_after_patience_evaluations(fashion_data_dir, tmp_path, caplog, capsys):
    # The run: a rate too small to move accuracy, validated often; it ran all its evaluations.
    def train(*flags):
        return run(fashion.TASK, build_parser(fashion.TASK).parse_args([
            "--data-dir", fashion_data_dir, "--model-dir", str(tmp_path), "--batch-size", "32", "--learning-rate",
            "1e-9", "--lr-scaling", "none", "--eval-every-steps", "5", "--bootstrap-resamples", "10",
            "--warm-up-steps", "1", "--precision", "fp32", *flags]))  # (in bf16 a near tie flipped one image once)
    assert train("--max-steps", "10")["stopped_because"] == "max_steps"
    # Resumed under a rule its evaluations already meet: it trains nothing, and its report says why it stopped
    # (it reprinted the first run's, which said max_steps).
    caplog.clear()
    stricter = train("--max-steps", "3000", "--patience", "1")
    assert stricter["stopped_because"] == "patience" and stricter["global_step"] == 10
    assert stricter["max_steps"] == 3000 and "not training past step 10" in caplog.text
    assert "no throughput measured" not in caplog.text  # no step trained: nothing to time
    # A rule they do not meet yet: on to step 15, 5 steps, all of them warm-up (the warning counted 2990).
    results = train("--max-steps", "3000", "--patience", "2", "--warm-up-steps", "10")
    assert "no throughput measured: 5 steps ran, and the first 10" in caplog.text
    accuracies = [e["validation_accuracy"] for e in results["evaluations"]]
    assert len(set(accuracies)) == 1  # flat, as the loss crept
    assert results["stopped_because"] == "patience" and results["global_step"] == 15
    assert results["early_stopping"] == {"monitor": "validation_accuracy", "stop_at_accuracy": None, "patience": 2,
                                         "min_delta": 0.0}
    # The same command again: its results, and no header of steps to train (it printed "... to global step 3000"
    # and built the Estimator before it said so)
    capsys.readouterr()
    again = train("--max-steps", "3000", "--patience", "2", "--warm-up-steps", "10")
    printed = capsys.readouterr().out
    assert again["global_step"] == 15 and printed.startswith("fashion: already finished at global step 15 (on ")
    assert "to global step 3000" not in printed and "stopped: patience" in printed


def test_early_stopping_with_nothing_to_watch_is_refused_before_training(fashion_data_dir, tmp_path, capsys):
    def refused(*flags):  # train_fashion.py's command line, in this process: a refusal needs no new TensorFlow
        code = train_main(fashion.TASK, list(flags))
        captured = capsys.readouterr()
        return types.SimpleNamespace(returncode=code, stdout=captured.out, stderr=captured.err)

    no_split = refused("--data-dir", fashion_data_dir, "--model-dir", str(tmp_path / "a"), "--validation-fraction",
                       "0", "--patience", "2", "--max-steps", "5")
    assert no_split.returncode == 2
    assert_clean_failure(no_split, "--patience stops training on the validation split", "--validation-fraction")
    synthetic = refused("--synthetic", "--model-dir", str(tmp_path / "b"), "--stop-at-accuracy", "0.9",
                        "--max-steps", "5")
    assert synthetic.returncode == 2 and "--synthetic data has no validation split" in synthetic.stderr
    delta = refused("--data-dir", fashion_data_dir, "--model-dir", str(tmp_path / "c"), "--min-delta", "0.01",
                    "--max-steps", "5")
    assert delta.returncode == 2 and "give --patience N with it" in delta.stderr
    # flags of what a run makes at its end, given without what they act on (each was ignored without a word)
    point = refused("--data-dir", fashion_data_dir, "--model-dir", str(tmp_path / "g"), "--at-specificity", "0.5",
                    "--max-steps", "5")  # the Fashion job makes no referral decision of its own
    assert point.returncode == 2 and "--at-specificity is the referral decision's operating point, and this run " \
        "makes no referral decision; give --positive-classes NAME,NAME with it" in point.stderr
    tolerance = refused("--data-dir", fashion_data_dir, "--model-dir", str(tmp_path / "h"), "--tflite-tolerance",
                        "0.5", "--max-steps", "5")
    assert tolerance.returncode == 2 and "give --tflite KINDS with it, or drop --tflite-tolerance" in tolerance.stderr
    cadence = refused("--data-dir", fashion_data_dir, "--model-dir", str(tmp_path / "d"), "--validation-fraction", "0",
                      "--eval-every-steps", "5", "--max-steps", "5")
    assert cadence.returncode == 2 and "--eval-every-steps sets how often the validation split" in cadence.stderr
    elsewhere = refused("--data-dir", fashion_data_dir, "--model-dir", str(tmp_path / "e"), "--validation-dir",
                        fashion_data_dir, "--max-steps", "5")
    assert elsewhere.returncode == 2 and "the Fashion job holds out --validation-fraction" in elsewhere.stderr
    with pytest.raises(SystemExit, match="2"):  # argparse's refusal: nothing left to train on
        refused("--data-dir", fashion_data_dir, "--model-dir", str(tmp_path / "f"), "--validation-fraction", "1")
    assert "--validation-fraction: must be from 0 to below 1" in capsys.readouterr().err
    for folder in ("a", "b", "c", "d", "e"):
        assert not list((tmp_path / folder).glob("model.ckpt-*"))  # nothing trained
