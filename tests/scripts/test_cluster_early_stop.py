"""Early stopping in clusters on 127.0.0.1, through the real launcher, on the real Fashion sample: the
chief validates between its steps, and every task ends after the step of the stop (exit 0, no task
left waiting for another)."""
import json
import re
import subprocess
import sys

from tests.scripts.test_cluster import LAUNCHER, TRAIN

TARGET = 0.2  # reached after 30-40 steps of 32 images at the scaled learning rate (1.1 epochs' worth)
ASYNCHRONOUS_MAX_STEPS = 4000


def launch(cluster_flags, strategy, data_dir, model_dir, every_steps, max_steps=400):
    return subprocess.run([sys.executable, LAUNCHER, *cluster_flags, "--", sys.executable, TRAIN,
                           "--strategy", strategy, "--data-dir", data_dir, "--model-dir", str(model_dir),
                           "--batch-size", "16", "--max-steps", str(max_steps), "--eval-every-steps", str(every_steps),
                           "--stop-at-accuracy", str(TARGET), "--log-steps", "10", "--eval-throttle-secs", "1",
                           "--seed", "1"], capture_output=True, text=True, timeout=240)


def own_steps(output):
    """Returns {task: (steps it ran, the global step it ended at)} from each trainer's last line."""
    return {task: (int(steps), int(last)) for task, steps, last in
            re.findall(r"\[(chief|worker \d+)\] .* ran (\d+) steps, from global step \d+ to (\d+)", output)}


def assert_stopped_at_the_first_evaluation_reaching_the_target(results):
    accuracies = [e["validation_accuracy"] for e in results["evaluations"]]
    assert accuracies[-1] >= TARGET and all(a < TARGET for a in accuracies[:-1]), accuracies
    assert results["stopped_because"] == "target_accuracy"
    assert results["best"]["step"] == results["evaluations"][-1]["step"] == results["eval_step"]


def test_every_synchronous_task_stops_after_the_same_step(fashion_data_dir, tmp_path):
    model_dir = tmp_path / "m"
    result = launch(["--workers", "1"], "multi_worker_mirrored", fashion_data_dir, model_dir, 10)
    assert result.returncode == 0, result.stdout[-3000:]
    assert "[launcher] all tasks finished" in result.stdout
    results = json.loads((model_dir / "results.json").read_text())
    assert_stopped_at_the_first_evaluation_reaching_the_target(results)
    # The chief evaluated step S while the worker waited in step S+1's all-reduce: both end after S+1.
    stop = results["best"]["step"] + 1
    assert own_steps(result.stdout) == {"chief": (stop, stop), "worker 0": (stop, stop)}, result.stdout[-3000:]
    assert results["global_step"] == stop
    assert json.loads((model_dir / "stop.json").read_text()) == {"stop_after_step": stop,
                                                                 "because": "target_accuracy"}


def test_asynchronous_workers_the_parameter_server_and_the_evaluator_end_after_an_early_stop(
        fashion_data_dir, tmp_path):
    model_dir = tmp_path / "m"
    model_dir.mkdir()
    # An earlier run's record, which would stop every trainer after its first step: the chief removes it.
    (model_dir / "stop.json").write_text(json.dumps({"stop_after_step": 1, "because": "patience"}))
    # The worker trains on while the chief evaluates between its own steps (about 200 of its steps in
    # one evaluation on a quiet 2-core machine): with --max-steps 400 it could reach the final step first.
    result = launch(["--workers", "1", "--ps", "1", "--evaluator"], "parameter_server", fashion_data_dir,
                    model_dir, 20, max_steps=ASYNCHRONOUS_MAX_STEPS)
    assert result.returncode == 0, result.stdout[-3000:]
    results = json.loads((model_dir / "results.json").read_text())
    assert_stopped_at_the_first_evaluation_reaching_the_target(results)
    assert results["global_step"] < ASYNCHRONOUS_MAX_STEPS
    stop = json.loads((model_dir / "stop.json").read_text())["stop_after_step"]
    assert stop > 1
    # Each asynchronous trainer ends after its first step at or past the record's step.
    assert all(last >= stop for _, last in own_steps(result.stdout).values()), result.stdout[-3000:]
    assert "[ps 0] train_fashion.py: ps 0: training finished and every trainer ended" in result.stdout
    assert re.search(r"\[evaluator\] .*training stopped early after step \d+ \(target_accuracy\): the evaluator "
                     r"ends", result.stdout), result.stdout[-3000:]
    assert "[launcher] all tasks finished" in result.stdout
    assert "removed an earlier run's stop record" in result.stdout


def test_a_relaunch_after_an_early_stop_writes_the_report_there_and_trains_no_further(fashion_data_dir, tmp_path):
    """The chief killed before its report after an early stop: its relaunch removed the stop record as an earlier
    run's and trained on past the stop, to the next evaluation that met the rule again."""
    import os
    model_dir = tmp_path / "m"
    os.environ["PIPELINE_KILL_AT"] = "test_evaluation:1"
    try:
        killed = launch(["--workers", "1"], "multi_worker_mirrored", fashion_data_dir, model_dir, 10)
    finally:
        del os.environ["PIPELINE_KILL_AT"]
    assert killed.returncode != 0 and not (model_dir / "results.json").exists(), killed.stdout[-3000:]
    stop = json.loads((model_dir / "stop.json").read_text())["stop_after_step"]
    result = launch(["--workers", "1"], "multi_worker_mirrored", fashion_data_dir, model_dir, 10)
    assert result.returncode == 0, result.stdout[-3000:]
    assert f"not training past step {stop}: the cluster's training stopped early there" in result.stdout
    assert f"worker 0: training stopped early after step {stop} (target_accuracy) already; nothing to train" \
        in result.stdout
    results = json.loads((model_dir / "results.json").read_text())
    assert results["global_step"] == stop and results["start_global_step"] == stop
    assert_stopped_at_the_first_evaluation_reaching_the_target(results)
    assert not list(model_dir.glob(f"model.ckpt-{stop + 1}*"))
    again = launch(["--workers", "1"], "multi_worker_mirrored", fashion_data_dir, model_dir, 10)  # a finished job
    assert again.returncode == 0 and f"already finished at global step {stop}" in again.stdout, again.stdout[-3000:]
    assert json.loads((model_dir / "results.json").read_text()) == results
