"""Cluster tasks started as a scheduler starts them (each its own process with its own TF_CONFIG, no
supervisor), then a peer killed or stopped: every surviving task ends within --peer-timeout-secs with
one line and the retryable exit code, and relaunching every task finishes the run."""
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from cluster.launcher import cluster_tasks
from cluster.peers import PEER_LOST_EXIT
from tests.conftest import ROOT

TRAIN = os.path.join(ROOT, "scripts", "train_fashion.py")
LAUNCHER = os.path.join(ROOT, "scripts", "launch_local_cluster.py")
TIMEOUT = 10  # --peer-timeout-secs in these tests
BOUND = TIMEOUT + 25  # the timeout, a probe period and a loaded 2-core machine's slack


class Task:
    """One task of a hand-run cluster; its stdout and stderr go to a log file."""

    def __init__(self, label, tf_config, flags, log_dir):
        self.label, self.log = label, log_dir / f"{label.replace(' ', '-')}.log"
        with open(self.log, "w") as out:
            self.process = subprocess.Popen([sys.executable, TRAIN, *flags], stdout=out, stderr=subprocess.STDOUT,
                                            env=dict(os.environ, TF_CONFIG=json.dumps(tf_config)))

    def text(self):
        return self.log.read_text(errors="replace")

    def wait_for(self, pattern, timeout=150):
        """Returns the first match of `pattern` in the log, waiting for it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            match = re.search(pattern, self.text(), re.M)
            if match:
                return match
            assert self.process.poll() is None, f"{self.label} ended first:\n{self.text()[-3000:]}"
            time.sleep(0.2)
        raise AssertionError(f"{self.label}: no {pattern!r} in {timeout} s:\n{self.text()[-3000:]}")

    def end(self):
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


def start_cluster(tasks, flags, log_dir):
    """Starts every task; under parameter_server the workers once the chief's session exists (a
    worker that finds the variables not yet initialized rechecks only 30 s later)."""
    first = [(label, c) for label, c in tasks if "parameter_server" not in flags or not label.startswith("worker")]
    cluster = {label: Task(label, tf_config, flags, log_dir) for label, tf_config in first}
    if len(first) < len(tasks):
        cluster["chief"].wait_for(r"Saving checkpoints for \d+ ")
        cluster.update({label: Task(label, c, flags, log_dir) for label, c in tasks if label not in cluster})
    return cluster


def flags(data_dir, model_dir, strategy, max_steps=300):
    return ["--strategy", strategy, "--data-dir", data_dir, "--model-dir", str(model_dir), "--batch-size", "8",
            "--max-steps", str(max_steps), "--checkpoint-steps", "20", "--warm-up-steps", "2", "--log-steps", "50",
            "--peer-timeout-secs", str(TIMEOUT), "--eval-throttle-secs", "1"]


def assert_lost(task, peer, since, reason=None):
    """Asserts that `task` ends within BOUND of `since` with the one line naming `peer`; returns the line."""
    code = task.process.wait(timeout=max(1, BOUND - (time.monotonic() - since)))
    text = task.text()
    last = text.strip().splitlines()[-1]
    assert code == PEER_LOST_EXIT, text[-3000:]
    assert re.search(rf"error: lost {peer} at 127\.0\.0\.1:\d+ {reason or ''}", last), last
    assert "Relaunch every task of the cluster with the same command: it resumes from " in last
    assert re.search(r"model\.ckpt-[1-9]\d*$", last), last
    assert "Traceback" not in text and text.count("Restoring parameters") <= 2, text[-3000:]
    return last


def relaunch_finishes(tasks, fl, log_dir, exact=True):
    """Relaunches every task with the same flags; asserts they end 0 at the final step."""
    relaunched = start_cluster(tasks, fl, log_dir)
    try:
        for task in relaunched.values():
            assert task.process.wait(timeout=240) == 0, task.text()[-3000:]
    finally:
        for task in relaunched.values():
            task.end()
    results = json.loads((log_dir / "m" / "results.json").read_text())
    max_steps = int(fl[fl.index("--max-steps") + 1])
    assert results["start_global_step"] >= 20
    assert results["global_step"] == max_steps if exact else max_steps <= results["global_step"] <= max_steps + 4
    return relaunched


@pytest.mark.parametrize("victim, survivor, how", [("worker 0", "chief", signal.SIGKILL),
                                                   ("chief", "worker 0", signal.SIGKILL),
                                                   ("worker 0", "chief", signal.SIGSTOP)],
                         ids=["kill-worker", "kill-chief", "stop-worker"])
def test_multi_worker_mirrored_ends_when_a_peer_is_lost_and_the_relaunch_finishes(
        fashion_data_dir, tmp_path, victim, survivor, how):
    tasks = cluster_tasks(workers=1)
    fl = flags(fashion_data_dir, tmp_path / "m", "multi_worker_mirrored")
    cluster = start_cluster(tasks, fl, tmp_path)
    try:
        cluster["chief"].wait_for(r"Saving checkpoints for [1-9]\d* ")
        os.kill(cluster[victim].process.pid, how)
        killed_at = time.monotonic()
        reason = "does not answer" if how == signal.SIGSTOP else None
        assert_lost(cluster[survivor], victim.replace("chief", "chief 0"), killed_at, reason)
    finally:
        for task in cluster.values():
            task.end()
    relaunch_finishes(tasks, fl, tmp_path)


@pytest.mark.parametrize("victim", ["ps 0", "worker 0"], ids=["kill-ps", "kill-worker"])
def test_parameter_server_cluster_ends_when_a_ps_or_worker_is_lost(fashion_data_dir, tmp_path, victim):
    tasks = cluster_tasks(workers=1, ps=1)
    fl = flags(fashion_data_dir, tmp_path / "m", "parameter_server", max_steps=1600)
    cluster = start_cluster(tasks, fl, tmp_path)
    try:
        cluster["worker 0"].wait_for(r"step \d+/1600")
        os.kill(cluster[victim].process.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        for label, task in cluster.items():
            if label != victim:
                assert_lost(task, victim, killed_at)
    finally:
        for task in cluster.values():
            task.end()
    relaunched = relaunch_finishes(tasks, fl, tmp_path, exact=False)
    # The relaunched ps ended by itself once training finished: nothing was left to stop.
    assert "training finished and every trainer ended" in relaunched["ps 0"].text()


def test_a_dead_evaluator_is_warned_about_once_and_training_goes_on(fashion_data_dir, tmp_path):
    fl = flags(fashion_data_dir, tmp_path / "m", "multi_worker_mirrored", max_steps=200)
    launcher = subprocess.Popen([sys.executable, LAUNCHER, "--workers", "1", "--evaluator", "--",
                                 sys.executable, TRAIN, *fl], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
    output = []
    for line in launcher.stdout:
        output.append(line)
        match = re.match(r"\[launcher\] started evaluator \(pid (\d+)\)", line)
        if match:
            evaluator = int(match.group(1))
        if re.match(r"\[evaluator\] .*Saving dict for global step", line):
            os.kill(evaluator, signal.SIGKILL)
            break
    output += launcher.stdout.readlines()
    assert launcher.wait(timeout=240) == 0, "".join(output)[-3000:]
    text = "".join(output)
    assert text.count("[launcher] the evaluator was killed by SIGKILL; training goes on without it") == 1, text
    assert json.loads((tmp_path / "m" / "results.json").read_text())["global_step"] == 200
