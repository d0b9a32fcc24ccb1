"""benchmark --target-accuracy: time to validation accuracy, through the run loop's validation."""
import csv
import json
import os

import pytest

from benchmark import accuracy_report
from benchmark.cli import main
from pipeline.machine import describe_cpu


def read_outputs(out):
    with open(os.path.join(out, "results.csv")) as f:
        rows = list(csv.DictReader(f))
    with open(os.path.join(out, "results.json")) as f:
        return rows, json.load(f)["rows"], open(os.path.join(out, "report.md")).read()


def test_a_tiny_sweep_times_each_configuration_to_its_first_evaluation_at_the_target(fashion_data_dir, tmp_path,
                                                                                     capsys):
    out = str(tmp_path / "tta")
    code = main(["--task", "fashion", "--target-accuracy", "0.3", "--cpu-replicas", "1,2", "--batch-size", "16",
                 "--repeats", "1", "--eval-every-steps", "4", "--max-steps", "40", "--warm-up-steps", "0",
                 "--lr-scaling", "none", "--seed", "3", "--output", out, "--data-dir", fashion_data_dir])
    assert code == 0, capsys.readouterr().err[-2000:]
    printed = capsys.readouterr().out
    assert printed.startswith("benchmark: fashion, time to validation accuracy 0.3") and "[2/2]" in printed
    assert describe_cpu() in printed.splitlines()[0]
    csv_rows, rows, report = read_outputs(out)
    assert [(r["engine"], r["data"], r["replicas"], r["seed"]) for r in csv_rows] == [
        ("estimator", "real", "1", "3"), ("estimator", "real", "2", "3")]
    for row in rows:
        evaluations = row["evaluations"]
        assert row["reached"] and row["stopped_because"] == "target_accuracy"
        # The first evaluation at the target is the last one: training stopped there.
        assert evaluations[-1]["validation_accuracy"] >= 0.3 > max(
            [e["validation_accuracy"] for e in evaluations[:-1]], default=0)
        assert [e["step"] for e in evaluations] == list(range(4, 4 * len(evaluations) + 1, 4))
        assert row["steps_to_accuracy"] == evaluations[-1]["step"] == row["final_step"]
        assert row["evaluations_to_accuracy"] == len(evaluations)
        assert row["images_to_accuracy"] == row["steps_to_accuracy"] * row["global_batch_size"]
        assert row["validation_examples"] == 82 and row["train_examples"] == 718
        # The time runs from the start to the end of the reaching evaluation: it holds every evaluation
        # and every training step (all timed, no warm-up), and ends before train() returns.
        seconds = [e["seconds"] for e in evaluations]
        assert seconds == sorted(seconds) and row["seconds_to_accuracy"] == seconds[-1]
        training = row["steps_to_accuracy"] * row["global_batch_size"] / row["images_per_sec"]
        assert row["validation_seconds"] + training <= row["seconds_to_accuracy"] <= row["train_seconds"]
    assert rows[1]["global_batch_size"] == 32 and rows[1]["devices"] == "/cpu:0 /cpu:1"
    assert "| fp32 | 2 | 16 | 32 | 1 of 1 |" in report
    assert "fp32, 1 replica(s), batch 16/replica / fp32, 2 replica(s), batch 16/replica" in report
    for png in ("time_to_accuracy.png", "accuracy.png"):
        assert (tmp_path / "tta" / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_target_never_reached_is_reported_as_not_reached(fashion_data_dir, tmp_path, capsys):
    out = str(tmp_path / "tta")
    code = main(["--task", "fashion", "--target-accuracy", "1", "--cpu-replicas", "1", "--batch-size", "16",
                 "--repeats", "1", "--eval-every-steps", "3", "--max-steps", "6", "--output", out,
                 "--data-dir", fashion_data_dir])
    assert code == 0, capsys.readouterr().err[-2000:]
    assert "NOT reached (max_steps at step 6" in capsys.readouterr().out
    csv_rows, rows, report = read_outputs(out)
    assert [e["step"] for e in rows[0]["evaluations"]] == [3, 6]
    assert not rows[0]["reached"] and rows[0]["stopped_because"] == "max_steps" and rows[0]["final_step"] == 6
    assert csv_rows[0]["seconds_to_accuracy"] == csv_rows[0]["steps_to_accuracy"] == ""  # no figure made up
    assert "| 0 of 1 | not reached |" in report and "not reached (max_steps, best" in report
    assert "Ratios" not in report
    # A time budget ends it too, before any evaluation: still no figure.
    out = str(tmp_path / "budget")  # a folder holding a benchmark's results is refused
    code = main(["--task", "fashion", "--target-accuracy", "1", "--cpu-replicas", "1", "--batch-size", "16",
                 "--repeats", "1", "--eval-every-steps", "3", "--max-steps", "600", "--time-budget", "0.01",
                 "--output", out, "--data-dir", fashion_data_dir])
    assert code == 0
    csv_rows, rows, _ = read_outputs(out)
    assert rows[0]["stopped_because"] == "time_budget" and rows[0]["final_step"] < 600 and not rows[0]["reached"]
    assert rows[0]["evaluations"] == [] and csv_rows[0]["seconds_to_accuracy"] == ""


@pytest.mark.parametrize("flags, refusal", [
    (["--engines", "keras"], "--target-accuracy times the Estimator pipeline"),
    (["--synthetic"], "synthetic data has no accuracy to reach"),
    (["--data", "synthetic"], "synthetic data has no accuracy to reach"),
    (["--validation-fraction", "0"], "give --validation-fraction above 0"),
    (["--input-only"], "--input-only trains no model"),
])
def test_what_target_accuracy_cannot_time_is_refused(capsys, flags, refusal):
    with pytest.raises(SystemExit) as exit_info:
        main(["--task", "fashion", "--target-accuracy", "0.8"] + flags)
    assert exit_info.value.code == 2
    assert refusal in capsys.readouterr().err


def test_a_time_budget_needs_a_target(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--task", "fashion", "--time-budget", "60"])
    assert exit_info.value.code == 2
    assert "give --target-accuracy too" in capsys.readouterr().err


def test_ratios_pair_seeds_and_leave_out_configurations_that_missed_the_target():
    def row(prec, replicas, seed, seconds, rate=1000.0):
        return {"engine": "estimator", "data": "real", "precision": prec, "replicas": replicas,
                "per_replica_batch_size": 32, "global_batch_size": 32 * replicas, "seed": seed, "target_accuracy": 0.8,
                "reached": seconds is not None, "seconds_to_accuracy": seconds, "steps_to_accuracy": 10,
                "images_to_accuracy": 320 * replicas, "epochs_to_accuracy": 1.0, "evaluations_to_accuracy": 2,
                "validation_seconds": 1.0, "images_per_sec": rate, "best_validation_accuracy": 0.85,
                "load_average_at_start": 2.0}
    rows = [row("fp32", 1, 0, 10.0), row("fp32", 1, 1, 20.0), row("bf16", 1, 0, 8.0, 1500.0),
            row("bf16", 1, 1, 10.0, 1500.0), row("fp32", 2, 0, 12.0), row("fp32", 2, 1, None)]
    summary = accuracy_report.summarize(rows)
    assert [(s["precision"], s["replicas"], s["reached"], s["seconds_to_accuracy"]) for s in summary] == [
        ("fp32", 1, 2, 15.0), ("bf16", 1, 2, 9.0), ("fp32", 2, 1, 12.0)]
    found = {label: rest for label, *rest in accuracy_report.ratios(rows, summary)}
    assert list(found) == ["fp32, 1 replica(s), batch 32/replica / bf16, 1 replica(s), batch 32/replica"]
    time_ratio, per_seed, outside_ratio, rate_ratio, images_ratio = found[next(iter(found))]
    assert time_ratio == pytest.approx(15 / 9) and per_seed == pytest.approx((1.25, 2.0))
    assert outside_ratio == pytest.approx(14 / 8)  # 1 s of evaluation in each
    assert rate_ratio == pytest.approx(1.5) and images_ratio == pytest.approx(1.0)
