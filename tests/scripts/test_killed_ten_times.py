"""A --deterministic run killed with SIGKILL ten times, each time relaunched with the same command,
ends as if it never was: the same final and best checkpoints bit for bit, every validation the
straight run made, the same test figures and results, and nothing temporary left behind.

Four kills come at moments drawn from a seed; six are triggered by events a timer cannot hit
(acquisition.faults' kill points): while a checkpoint is written, during a validation, while the best
checkpoint is copied, during the best export, during the test evaluation and while results.json is
written. Each kill and what it interrupted (the killed process's last log line) is printed."""
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from acquisition.faults import KILL_VARIABLE
from pipeline.model_dir import read_checkpoint
from tests.conftest import ROOT

SEED = 20261124  # draws the timed kills' moments and the event kills' delays
# Each relaunch's kill: an event (kill point:pass) with a delay drawn from the seed where the kill must
# land inside the work that follows the point, or 'timed' (a seeded moment after the relaunch's first
# checkpoint). The order follows the run: the best copy needs a new best ahead, the test evaluation
# and results.json come after training.
PLAN = ("best_copy:1", "validation:1:delay", "timed", "checkpoint:3:delay", "best_export:1:delay", "timed",
        "checkpoint:2:delay", "timed", "timed", "test_evaluation:1:delay", "write results.json:1")
# Figures that belong to one process (times, throughput, counts of this process's steps and saves; the
# rates its first and last steps applied, none where it trained no step), and paths named by the moment
# they were made (an export's timestamp).
PER_PROCESS = {"train_seconds", "train_images_per_sec", "train_images_per_sec_std", "train_step_time_mean",
               "timed_steps", "mfu", "checkpoint_seconds", "checkpoints_saved", "start_global_step",
               "validation_seconds", "finished_at", "model_dir", "export_dir", "loss_warnings", "peak_flops",
               "learning_rate", "learning_rate_first_step"}
SCHEDULE_PER_PROCESS = {"start_step", "images_at_start"}  # where this process's schedule starts


def command(data_dir, model_dir, replicas):
    return [sys.executable, os.path.join(ROOT, "scripts", "train_fashion.py"), "--data-dir", data_dir,
            "--model-dir", str(model_dir), "--deterministic", "--seed", "3", "--batch-size", "32",
            "--learning-rate", "3e-3", "--lr-scaling", "none", "--max-steps", "300", "--eval-every-steps", "20",
            "--checkpoint-steps", "10", "--patience", "2", "--bootstrap-resamples", "50", "--log-steps", "50",
            "--warm-up-steps", "2"] + (["--cpu-replicas", str(replicas)] if replicas > 1 else [])


def newest_step(model_dir):
    steps = [int(m.group(1)) for name in os.listdir(model_dir) for m in [re.match(r"model\.ckpt-(\d+)\.index$", name)]
             if m]
    return max(steps, default=None)


def launch_and_kill(argv, model_dir, kill, rng, log):
    """Runs `argv` until `kill` ends it; returns a line saying what the kill interrupted."""
    env, point = dict(os.environ), None
    if kill != "timed":
        point = kill.replace("delay", str(rng.randint(1, 40)))
        env[KILL_VARIABLE] = point
    with open(log, "w") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
        if kill == "timed":
            start = newest_step(model_dir) if os.path.isdir(model_dir) else None
            deadline = time.monotonic() + 600
            while (newest_step(model_dir) if os.path.isdir(model_dir) else None) in (None, start):
                assert process.poll() is None and time.monotonic() < deadline, "no new checkpoint before it ended"
                time.sleep(0.02)
            delay = rng.uniform(0.0, 1.5)
            time.sleep(delay)
            point = f"timed, {delay:.2f} s after its first checkpoint"
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
        returncode = process.wait(timeout=900)
    text = open(log).read()
    assert returncode == -signal.SIGKILL, f"{point}: the run ended ({returncode}) before its kill:\n{text[-3000:]}"
    assert "Traceback" not in text, text[-3000:]
    last = [line for line in text.splitlines() if line.strip()][-1:] or ["(nothing logged)"]
    return f"{point}: newest checkpoint {newest_step(model_dir)}; last line: {last[0][:140]}"


def tensors(prefix):
    reader = read_checkpoint(prefix)
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def assert_bitwise_equal(a, b):
    ta, tb = tensors(a), tensors(b)
    assert sorted(ta) == sorted(tb)
    for name in ta:
        x, y = np.asarray(ta[name]), np.asarray(tb[name])  # a string tensor comes as bytes
        assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes(), name


def files_of(model_dir):
    """Returns the model dir's files, events files (named by time, host and process) and an export's
    timestamp folded, so that two runs' listings compare."""
    listed = set()
    for folder, _, names in os.walk(model_dir):
        for name in names:
            path = os.path.relpath(os.path.join(folder, name), model_dir)
            if "tfevents" in name:
                path = os.path.join(os.path.dirname(path), "events")
            listed.add(re.sub(r"^export/\d+", "export/<timestamp>", path))
    return listed


def comparable(results):
    kept = {k: v for k, v in results.items() if k not in PER_PROCESS}
    kept["learning_rate_schedule"] = {k: v for k, v in kept["learning_rate_schedule"].items()
                                      if k not in SCHEDULE_PER_PROCESS}
    if kept.get("best"):
        kept["best"] = {k: v for k, v in kept["best"].items() if k != "export_dir"}
    return kept


def straight_and_killed(data_dir, tmp_path, replicas):
    straight, killed = tmp_path / f"straight{replicas}", tmp_path / f"killed{replicas}"
    rng, kills = random.Random(SEED + replicas), []

    def kill_ten_times():
        for i, kill in enumerate(PLAN):
            kills.append(launch_and_kill(command(data_dir, killed, replicas), str(killed), kill, rng,
                                         tmp_path / f"killed{replicas}-{i}.log"))
        return subprocess.run(command(data_dir, killed, replicas), capture_output=True, text=True, timeout=900)
    with ThreadPoolExecutor(2) as pool:
        straight_run = pool.submit(subprocess.run, command(data_dir, straight, replicas), capture_output=True,
                                   text=True, timeout=900)
        last = pool.submit(kill_ten_times).result()
        first = straight_run.result()
    print(f"\n{replicas} replica(s), seed {SEED + replicas}:\n  " + "\n  ".join(kills))
    for run in (first, last):
        assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr[-3000:]
    return straight, killed, kills


# On 2 replicas (MirroredStrategy), whose checkpoints, validations and test evaluation pass through the
# distribution's code besides the one-replica path's: a run on 1 replica killed and resumed is bitwise a
# straight one in tests/pipeline/test_determinism.py, and killed at checkpoint events in test_ema_cli.py
# and test_stop_and_damage.py (that test ran here too on 1 replica, 125 of the suite's 1,640 s).
@pytest.mark.parametrize("replicas", [2])
def test_a_run_killed_ten_times_ends_as_if_it_never_was(fashion_data_dir, tmp_path, replicas):
    straight, killed, kills = straight_and_killed(fashion_data_dir, tmp_path, replicas)
    assert len(kills) == len(PLAN)
    a, b = (json.loads((d / "results.json").read_text()) for d in (straight, killed))
    assert a["stopped_because"] == "patience" and a["global_step"] < a["max_steps"]  # early stopping acted
    assert b["start_global_step"] > 0  # the last launch resumed
    assert comparable(b) == comparable(a)  # every validation, the best, the test figures, the report
    final = f"model.ckpt-{a['global_step']}"
    assert_bitwise_equal(str(straight / final), str(killed / final))
    best = f"model.ckpt-{a['best']['step']}"
    assert_bitwise_equal(str(straight / "best" / best), str(killed / "best" / best))
    assert files_of(killed) == files_of(straight)  # nothing temporary left, no checkpoint more or less
    exports = []
    for d in (straight, killed):  # one export each, the recorded best's, with the same weights
        exports.append([str(p) for p in (d / "export").iterdir()])
        assert exports[-1] == [json.loads((d / "results.json").read_text())["best"]["export_dir"]]
    assert_bitwise_equal(*(os.path.join(e[0], "variables", "variables") for e in exports))
