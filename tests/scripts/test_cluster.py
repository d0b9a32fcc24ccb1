"""Clusters on 127.0.0.1 training the Fashion job through the real launcher."""
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT, assert_clean_failure

LAUNCHER = os.path.join(ROOT, "scripts", "launch_local_cluster.py")
TRAIN = os.path.join(ROOT, "scripts", "train_fashion.py")


def launch(cluster_flags, train_flags, timeout=300):
    return subprocess.run([sys.executable, LAUNCHER, *cluster_flags, "--", sys.executable, TRAIN, *train_flags],
                          capture_output=True, text=True, timeout=timeout)


def train_flags(data_dir, model_dir, strategy, max_steps):
    """Returns the job's flags, with no validation split: validation in a cluster is
    tests/scripts/test_cluster_early_stop.py's."""
    return ["--strategy", strategy, "--data-dir", data_dir, "--model-dir", str(model_dir), "--batch-size", "16",
            "--max-steps", str(max_steps), "--warm-up-steps", "2", "--log-steps", "10", "--eval-throttle-secs", "1",
            "--validation-fraction", "0"]


PS_TEST = "test_parameter_servers_train_asynchronously_and_are_stopped_at_the_end"
PS_RELAUNCH_TEST = "test_a_parameter_server_cluster_relaunched_task_by_task_onto_its_finished_model_dir_ends_0"
PS_STEPS = 400


@pytest.fixture(scope="module", autouse=True)
def parameter_server_launch(request, fashion_data_dir, tmp_path_factory):
    """The parameter-server cluster of PS_TEST (and PS_RELAUNCH_TEST, which relaunches it), started in the
    background before this module's first test, which runs meanwhile. Returns a function that waits for the
    launch and returns (model dir, CompletedProcess); None when neither is selected."""
    if not any(item.name in (PS_TEST, PS_RELAUNCH_TEST) and item.module.__name__ == __name__
               for item in request.session.items):
        yield None
        return
    root = tmp_path_factory.mktemp("ps-launch")
    flags = ["--workers", "1", "--ps", "1", "--evaluator", "--", sys.executable, TRAIN,
             *train_flags(fashion_data_dir, root / "m", "parameter_server", PS_STEPS), "--log-steps", "100"]
    with open(root / "stdout", "w") as stdout, open(root / "stderr", "w") as stderr:
        process = subprocess.Popen([sys.executable, LAUNCHER, *flags], stdout=stdout, stderr=stderr, text=True)

    def finished():
        process.wait(timeout=300)
        return root / "m", subprocess.CompletedProcess(process.args, process.returncode, (root / "stdout").read_text(),
                                                       (root / "stderr").read_text())
    try:
        yield finished
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)  # the launcher stops its tasks, as on Ctrl-C
            process.wait(30)


def evaluated_steps(folder):
    """Returns the sorted steps of the accuracy summaries in the event files of `folder`."""
    import tensorflow as tf
    return sorted(event.step for path in folder.glob("events.out.tfevents.*")
                  for event in tf.compat.v1.train.summary_iterator(str(path))
                  if any(value.tag == "accuracy" for value in event.summary.value))


def test_chief_and_two_workers_train_synchronously_to_the_requested_step_and_an_evaluator_follows(
        fashion_data_dir, tmp_path):
    result = launch(["--workers", "2", "--evaluator"],
                    train_flags(fashion_data_dir, tmp_path / "m", "multi_worker_mirrored", 20))
    assert result.returncode == 0, result.stdout[-3000:]
    results = json.loads((tmp_path / "m" / "results.json").read_text())
    assert results["global_step"] == 20 and results["replicas"] == 3 and results["global_batch_size"] == 48
    assert results["cluster"] == {"strategy": "multi_worker_mirrored", "training_workers": 3}
    # Synchronous replicas: every task logs the same loss at the same step.
    final = {task: re.search(rf"\[{task}\] .*Loss for final step: ([\d.]+)", result.stdout).group(1)
             for task in ("chief", "worker 0", "worker 1")}
    assert len(set(final.values())) == 1, final
    # The evaluator evaluates checkpoints as they come, the last one too.
    assert re.search(r"\[evaluator\] .*Saving dict for global step 20: accuracy", result.stdout)
    assert "[launcher] all tasks finished" in result.stdout
    # In TensorBoard the evaluator's curve is its own, and the chief's test evaluation is plotted once (the
    # evaluator wrote into the chief's eval/ too, with no validation split: step 20 twice, among its others).
    evaluated = {name: evaluated_steps(tmp_path / "m" / name) for name in ("eval", "eval_evaluator_test")}
    assert evaluated["eval_evaluator_test"][-1] == 20 and evaluated["eval"] == [20], evaluated
    # The workers' copies of the chief's checkpoints and summaries (TensorFlow's tmp_worker_N) are gone.
    assert not [name for name in os.listdir(tmp_path / "m") if name.startswith("tmp_")], os.listdir(tmp_path / "m")


def test_parameter_servers_train_asynchronously_and_are_stopped_at_the_end(parameter_server_launch):
    model_dir, result = parameter_server_launch()
    assert result.returncode == 0, result.stdout[-3000:]
    results = json.loads((model_dir / "results.json").read_text())
    # Asynchronous workers each check the limit against a global step the others
    # advance meanwhile, so they end at it or a few steps past it.
    assert PS_STEPS <= results["global_step"] <= PS_STEPS + 4
    assert "[launcher] all tasks finished" in result.stdout
    # The worker, started beside its chief, joins training within a recheck of the chief's variables
    # (1 s; TensorFlow's own 30 s had it join after the chief had trained alone to the end).
    ran = re.search(r"\[worker 0\] .*worker 0 ran (\d+) steps, from global step (\d+) to", result.stdout)
    assert ran, result.stdout[-3000:]
    steps, first = int(ran.group(1)), int(ran.group(2))
    assert first <= PS_STEPS // 4 and steps >= PS_STEPS // 8, ran.group(0)


def test_a_parameter_server_cluster_relaunched_task_by_task_onto_its_finished_model_dir_ends_0(
        parameter_server_launch, fashion_data_dir):
    """As Slurm relaunches a job step, each task its own process: the chief reprints, the worker has nothing to
    train, and neither starts a server; the ps, which had seen no trainer answer, served until the time limit."""
    from cluster.launcher import free_ports
    model_dir, launched = parameter_server_launch()
    assert launched.returncode == 0, launched.stdout[-3000:]
    addresses = {job: [f"127.0.0.1:{port}"] for job, port in zip(("chief", "worker", "ps"), free_ports(3))}
    flags = train_flags(fashion_data_dir, model_dir, "parameter_server", PS_STEPS)
    tasks = {job: subprocess.Popen([sys.executable, TRAIN, *flags], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True, env=dict(os.environ, TF_CONFIG=json.dumps(
                                       {"cluster": addresses, "task": {"type": job, "index": 0}})))
             for job in ("ps", "chief", "worker")}
    try:
        outputs = {job: task.communicate(timeout=120)[0] for job, task in tasks.items()}
    finally:
        for task in tasks.values():
            task.kill()
    assert {job: task.returncode for job, task in tasks.items()} == {"ps": 0, "chief": 0, "worker": 0}, outputs
    assert "training had finished, and the chief came and went without training" in outputs["ps"], \
        outputs["ps"][-2000:]
    assert "nothing to train" in outputs["worker"]


def test_a_killed_worker_fails_the_launch_and_a_relaunch_resumes(fashion_data_dir, tmp_path):
    model_dir = tmp_path / "m"
    # Killed at the first checkpoint past 0 (20), the run cannot finish first: its trainers go in lockstep.
    flags = train_flags(fashion_data_dir, model_dir, "multi_worker_mirrored", 60) + ["--checkpoint-steps", "20"]
    launcher = subprocess.Popen([sys.executable, LAUNCHER, "--workers", "2", "--", sys.executable, TRAIN, *flags],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output, worker_pid = [], None
    for line in launcher.stdout:
        output.append(line)
        match = re.match(r"\[launcher\] started worker 1 \(pid (\d+)\)", line)
        worker_pid = int(match.group(1)) if match else worker_pid
        if re.match(r"\[chief\] .*Saving checkpoints for ([1-9]\d*) ", line):
            os.kill(worker_pid, signal.SIGKILL)
            break
    output += launcher.stdout.readlines()
    assert launcher.wait(timeout=120) == 1
    text = "".join(output)
    assert "[launcher] worker 1 was killed by SIGKILL; stopping the cluster" in text
    assert not (model_dir / "results.json").exists()

    result = launch(["--workers", "2"], flags)
    assert result.returncode == 0, result.stdout[-3000:]
    results = json.loads((model_dir / "results.json").read_text())
    assert results["start_global_step"] >= 20 and results["global_step"] == 60


def test_an_evaluator_cluster_driven_by_epochs_finishes(fashion_data_dir, tmp_path):
    # Chief + 1 worker, 1 replica each, 16 images per replica: the 718 images left beside the validation
    # split take 23 steps an epoch. The evaluator must count the trainers' replicas to wait for step 23, not 45.
    flags = ["--strategy", "multi_worker_mirrored", "--data-dir", fashion_data_dir, "--model-dir",
             str(tmp_path / "m"), "--batch-size", "16", "--epochs", "1", "--warm-up-steps", "2",
             "--eval-throttle-secs", "1"]
    result = launch(["--workers", "1", "--evaluator"], flags)
    assert result.returncode == 0, result.stdout[-3000:]
    assert re.search(r"\[evaluator\] .*steps: +to global step 23,", result.stdout), result.stdout[-3000:]
    assert re.search(r"\[evaluator\] .*Saving dict for global step 23: accuracy", result.stdout)
    assert json.loads((tmp_path / "m" / "results.json").read_text())["global_step"] == 23


def test_a_task_whose_peers_never_start_names_them_and_gives_up(fashion_data_dir, tmp_path):
    from cluster.launcher import free_ports
    chief_port, worker_port = free_ports(2)
    tf_config = {"cluster": {"chief": [f"127.0.0.1:{chief_port}"], "worker": [f"127.0.0.1:{worker_port}"]},
                 "task": {"type": "chief", "index": 0}}
    started = time.monotonic()
    result = subprocess.run([sys.executable, TRAIN, "--strategy", "multi_worker_mirrored", "--data-dir",
                             fashion_data_dir, "--model-dir", str(tmp_path / "m"), "--max-steps", "10",
                             "--cluster-wait-secs", "9"], env=dict(os.environ, TF_CONFIG=json.dumps(tf_config)),
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1 and time.monotonic() - started < 60
    assert f"waiting for the cluster to start: no answer from worker 0 at 127.0.0.1:{worker_port}" in result.stderr
    assert_clean_failure(result, "the cluster did not start within 9 s", f"worker 0 at 127.0.0.1:{worker_port}",
                         "raise --cluster-wait-secs")


def test_a_parameter_server_serves_without_reading_the_data_and_ends_at_a_stop_signal(tmp_path):
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tf_config = {"cluster": {"chief": ["127.0.0.1:1"], "ps": [f"127.0.0.1:{port}"]}, "task": {"type": "ps", "index": 0}}
    # No data at all: a parameter server that read it would stop with the missing-data line.
    ps = subprocess.Popen([sys.executable, TRAIN, "--strategy", "parameter_server", "--data-dir",
                           str(tmp_path / "absent"), "--no-sample-fallback", "--download-url", "http://127.0.0.1:9/",
                           "--model-dir", str(tmp_path / "m")],
                          env=dict(os.environ, TF_CONFIG=json.dumps(tf_config)), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert ps.poll() is None, ps.communicate()[1][-2000:]
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the parameter server never listened"
                time.sleep(0.2)
        assert not (tmp_path / "absent").exists()
        # It serves inside TensorFlow's C++, where Python's handler never runs: it ignored SIGTERM. With no
        # chief to save a checkpoint from its variables, it ends as a stopped run does.
        ps.send_signal(signal.SIGTERM)
        _, err = ps.communicate(timeout=60)
        assert ps.returncode == 143, err[-2000:]
        assert err.strip().splitlines()[-1] == (
            f"train_fashion.py: stopped by SIGTERM; ps 0 served until the chief, which saves the checkpoints, had "
            f"ended: no checkpoint was written in {tmp_path / 'm'} yet")
    finally:
        ps.kill()
        ps.communicate()


def test_a_worker_stopped_while_it_waits_for_its_cluster_ends_as_its_stop(fashion_data_dir, tmp_path):
    # It waits inside TensorFlow's session creation, where Python's handler never runs: it ignored SIGTERM.
    from cluster.launcher import free_ports
    addresses = [f"127.0.0.1:{port}" for port in free_ports(2)]
    tf_config = {"cluster": {"chief": addresses[:1], "worker": addresses[1:]}, "task": {"type": "worker", "index": 0}}
    task = subprocess.Popen([sys.executable, TRAIN, "--strategy", "multi_worker_mirrored", "--data-dir",
                             fashion_data_dir, "--model-dir", str(tmp_path / "m"), "--max-steps", "10",
                             "--cluster-wait-secs", "300"], env=dict(os.environ, TF_CONFIG=json.dumps(tf_config)),
                            stderr=subprocess.PIPE, text=True)
    try:
        for line in task.stderr:  # its server is up: it waits for the chief
            if " listens on " in line:
                break
        time.sleep(2)
        task.send_signal(signal.SIGTERM)
        _, err = task.communicate(timeout=60)
    finally:
        task.kill()
    assert task.returncode == 143, err[-2000:]
    assert err.strip().splitlines()[-1] == (
        "train_fashion.py: stopped by SIGTERM while waiting for the cluster to start, before this task's first step: "
        f"no checkpoint was written in {tmp_path / 'm'} yet")


def test_a_chief_killed_before_its_report_is_finished_at_the_final_step_and_a_finished_run_ends_at_once(
        fashion_data_dir, tmp_path):
    # Every task relaunched trained one step past --max-steps (a cluster's StopAtStepHook steps once before it
    # stops); a finished job relaunched kept its workers waiting --cluster-wait-secs for a chief that had ended;
    # and the relaunched chief, writing the report alone, waited for a cluster that would never start, ending 1
    # after --cluster-wait-secs (3 here: its test evaluation and export take longer).
    model_dir = tmp_path / "m"
    flags = train_flags(fashion_data_dir, model_dir, "multi_worker_mirrored", 10)
    killed = subprocess.run([sys.executable, LAUNCHER, "--workers", "1", "--", sys.executable, TRAIN, *flags],
                            env=dict(os.environ, PIPELINE_KILL_AT="test_evaluation:1"), capture_output=True,
                            text=True, timeout=300)
    assert killed.returncode != 0 and not (model_dir / "results.json").exists(), killed.stdout[-2000:]
    for run in ("relaunched", "finished"):
        result = launch(["--workers", "1"], flags + ["--cluster-wait-secs", "3"], timeout=100)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
        assert "waiting for the cluster" not in result.stdout + result.stderr, run
        assert "worker 0: the model dir has trained to its final step 10 already; nothing to train" in result.stdout
        results = json.loads((model_dir / "results.json").read_text())
        assert results["global_step"] == 10 and not (model_dir / "model.ckpt-11.index").exists(), run


def test_a_task_whose_port_is_in_use_is_one_line_naming_its_address_and_leaves_no_model_dir(
        fashion_data_dir, tmp_path):
    import socket
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = {"cluster": {"chief": [f"127.0.0.1:{port}"], "worker": ["127.0.0.1:1"]},
                  "task": {"type": "chief", "index": 0}}
        result = subprocess.run([sys.executable, TRAIN, *train_flags(fashion_data_dir, tmp_path / "m",
                                                                     "multi_worker_mirrored", 10)],
                                env=dict(os.environ, TF_CONFIG=json.dumps(config)), capture_output=True, text=True,
                                timeout=120)
    assert result.returncode == 1
    assert_clean_failure(result, "this task's TensorFlow server could not listen on its port (TF_CONFIG gives chief 0 "
                                 f"the address 127.0.0.1:{port})")
    assert not (tmp_path / "m").exists()  # it held the run's record and first weights only
