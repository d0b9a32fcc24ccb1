"""A local cluster training the Fashion job through the real launcher: its sockets reach no one but
its own tasks, and no task outlives the launcher, whether it is stopped (SIGTERM, SIGINT) or killed
(kill -9). Each stop leaves a newest checkpoint that restores. Each task's output is kept in a file of
its own under the test's tmp_path (the launcher's --log-dir), and a failing check shows them."""
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


def start_training(model_dir, workers=1, log_dir=None):
    """Starts a chief and `workers` workers (each one's output kept in `log_dir`, if given); returns
    (launcher, output lines so far, {label: pid}) once all have trained 10 steps and logged their ports."""
    logs = ["--log-dir", str(log_dir)] if log_dir else []
    launcher = subprocess.Popen([sys.executable, LAUNCHER, "--workers", str(workers), *logs, "--", sys.executable,
                                 TRAIN, *train_flags(model_dir)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
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


def task_logs(log_dir, lines):
    """Returns the launcher's output (`lines`, also written to launcher.log) and each task's log, whole,
    for a failing check's message."""
    (log_dir / "launcher.log").write_text("".join(lines))
    return "\n".join(f"===== {path.name}\n{path.read_text()[-4000:]}" for path in sorted(log_dir.glob("*.log")))


def last_line(path):
    """Returns the last line a task wrote before the launcher's line with its exit code, and that line."""
    *_, line, exit_line = path.read_text().splitlines()
    return line, exit_line


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
    """Under multi_worker_mirrored every step is an all-reduce of both trainers, and the SIGTERMs the
    launcher passes on reach them at steps of their own: the chief and the worker still stop after one
    and the same step (their stop requests are all-reduced with it, hooks.stop), the chief saves its
    checkpoint, and the worker's last line, written once that checkpoint is there, names it. Before,
    one of them stopped a step earlier and the other waited in the next step's all-reduce until its
    peer watch ended it as a lost peer (exit 200), the chief then without the stop's checkpoint."""
    model_dir, log_dir = tmp_path / "m", tmp_path / "logs"
    launcher, lines, pids = start_training(model_dir, log_dir=log_dir)
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
    assert launcher.wait(timeout=120) == 143, task_logs(log_dir, lines)
    assert_all_end_within_60_s(pids)
    logs = task_logs(log_dir, lines)
    chief_line, chief_exit = last_line(log_dir / "chief.log")
    stopped = re.fullmatch(rf"train_fashion.py: stopped by SIGTERM at global step (\d+); checkpoint saved in "
                           rf"{re.escape(str(model_dir))}: run the same command to resume", chief_line)
    assert stopped and chief_exit == "[launcher] chief exited with code 143", logs
    step = int(stopped.group(1))
    assert last_line(log_dir / "worker_0.log") == (
        f"train_fashion.py: stopped by SIGTERM; the latest checkpoint, model.ckpt-{step}, is kept in {model_dir}: "
        "run the same command to resume", "[launcher] worker 0 exited with code 143"), logs
    assert " lost " not in logs and "[launcher] killed" not in logs, logs
    assert newest_checkpoint_step(model_dir) == step > 0


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
