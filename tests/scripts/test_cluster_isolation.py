"""A local cluster training the Fashion job through the real launcher: its sockets reach no one but
its own tasks, and no task outlives the launcher, whether it is stopped (SIGTERM, SIGINT) or killed
(kill -9). Each stop leaves a newest checkpoint that restores."""
import os
import re
import signal
import subprocess
import sys
import time

import tensorflow as tf

from cluster.isolation import interfaces, listening_sockets, namespace
from tests.conftest import ROOT, alive

LAUNCHER = os.path.join(ROOT, "scripts", "launch_local_cluster.py")
TRAIN = os.path.join(ROOT, "scripts", "train_fashion.py")


def train_flags(model_dir, max_steps=100000):
    """Returns the job's flags. An isolated cluster training to its last step: tests/scripts/test_cluster.py."""
    # Checkpoints at step 0 and then only when stopped: a newest one past 0 is the stop's.
    return ["--strategy", "multi_worker_mirrored", "--synthetic", "--model-dir", str(model_dir), "--batch-size", "16",
            "--max-steps", str(max_steps), "--warm-up-steps", "2", "--log-steps", "10", "--checkpoint-steps", "1000"]


def start_training(model_dir, workers=1):
    """Starts a chief and `workers` workers; returns (launcher, output lines so far, {label: pid}) once
    all have trained 10 steps and logged their ports."""
    launcher = subprocess.Popen([sys.executable, LAUNCHER, "--workers", str(workers), "--", sys.executable, TRAIN,
                                 *train_flags(model_dir)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines, pids = [], {}
    for line in launcher.stdout:
        lines.append(line)
        match = re.match(r"\[launcher\] started (.*) \(pid (\d+)\)", line)
        if match:
            pids[match.group(1)] = int(match.group(2))
        if sum(bool(re.match(r"\[(chief|worker \d+)\] .* step 10/100000", line)) for line in lines) == 1 + workers:
            assert sum(" listens on " in line for line in lines) == 1 + workers, "".join(lines)
            return launcher, lines, pids
    raise AssertionError("the cluster ended before training: " + "".join(lines)[-3000:])


def assert_all_end_within_60_s(pids):
    deadline = time.monotonic() + 60
    while any(alive(pid) for pid in pids.values()):
        assert time.monotonic() < deadline, {label: pid for label, pid in pids.items() if alive(pid)}
        time.sleep(0.2)


def newest_checkpoint_step(model_dir):
    """Returns the global step of the newest checkpoint in `model_dir`, after reading every tensor of it."""
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(model_dir)))
    for name in reader.get_variable_to_shape_map():
        reader.get_tensor(name)
    return int(reader.get_tensor("estimator_global_step/.ATTRIBUTES/VARIABLE_VALUE"))


def host_listens_on(port):
    sockets = []
    for table in ("tcp", "tcp6"):
        with open(f"/proc/self/net/{table}") as f:
            sockets += [row.split() for row in f.readlines()[1:]]
    return any(row[3] == "0A" and int(row[1].rsplit(":", 1)[1], 16) == port for row in sockets)


def test_sigterm_stops_every_task_with_a_checkpoint_and_no_port_is_open_outside_the_cluster(tmp_path):
    model_dir = tmp_path / "m"
    launcher, lines, pids = start_training(model_dir)
    try:
        # The socket table of each task's namespace, read while the cluster trains.
        spaces = {namespace(pid) for pid in pids.values()}
        assert len(spaces) == 1 and namespace() not in spaces  # one namespace, not this machine's
        for label, pid in pids.items():
            assert interfaces(pid) == ["lo"], label
            sockets = listening_sockets(pid)
            assert sockets, label
            for address, port in sockets:  # TensorFlow binds every address of the namespace: lo alone
                assert not host_listens_on(port), (label, address, port)
    finally:
        os.kill(launcher.pid, signal.SIGTERM)
    lines += launcher.stdout.readlines()
    assert launcher.wait(timeout=120) == 143, "".join(lines)[-3000:]
    assert_all_end_within_60_s(pids)
    text = "".join(lines)
    stopped = int(re.search(r"\[chief\] train_fashion.py: stopped by SIGTERM at global step (\d+); checkpoint saved",
                            text).group(1))
    assert "[worker 0] train_fashion.py: stopped by SIGTERM" in text and "[launcher] killed" not in text, \
        "\n".join(line for line in text.splitlines() if line.startswith("[worker 0]"))[-3000:]
    assert newest_checkpoint_step(model_dir) == stopped > 0


def test_sigint_stops_the_task_with_a_checkpoint(tmp_path):
    launcher, lines, pids = start_training(tmp_path / "m", workers=0)  # passed on as SIGTERM is: one task will do
    os.kill(launcher.pid, signal.SIGINT)
    lines += launcher.stdout.readlines()
    assert launcher.wait(timeout=120) == 130, "".join(lines)[-3000:]
    assert_all_end_within_60_s(pids)
    stopped = re.search(r"\[chief\] train_fashion.py: stopped by SIGINT at global step (\d+)", "".join(lines))
    assert stopped, "".join(lines)[-3000:]
    assert newest_checkpoint_step(tmp_path / "m") == int(stopped.group(1)) > 0


def test_killing_the_launcher_ends_its_tasks_after_their_checkpoint(tmp_path):
    launcher, lines, pids = start_training(tmp_path / "m")
    launcher.kill()
    launcher.wait()
    # The tasks log on after their output's reader is gone (the stop's checkpoint line, the stop line).
    assert_all_end_within_60_s(pids)
    assert newest_checkpoint_step(tmp_path / "m") > 10  # written by the stop handling, not the step-0 saver
