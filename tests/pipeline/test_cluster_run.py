"""The end of a cluster task as its watches see it: a parameter server's at the end of training (the
chief's final checkpoint is written, then the chief stops answering before its results.json exists) or
after a stop signal, and a task's stopped while it waits for its cluster. Replayed in that order with
stand-in gRPC peers, so the ordering is deterministic."""
import json
import os
import signal
import socket
import threading
import time
from types import SimpleNamespace

import pytest

from cluster.peers import PEER_LOST_EXIT, PeerWatch
from cluster.tf_config import ClusterTask
from cluster.watch import HANDLER_GRACE_SECS, ClusterWatch
from pipeline.cluster_run import training_finished
from pipeline.training_record import PROGRESS_FILE


class FakeServer:
    """Answers the HTTP/2 preface with a SETTINGS frame header, as a TensorFlow server does, until closed."""

    def __init__(self):
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.socket.listen()
        self.address = f"127.0.0.1:{self.socket.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                connection, _ = self.socket.accept()
            except OSError:
                return
            with connection:
                connection.recv(64)
                self._answer(connection)

    def _answer(self, connection):
        connection.sendall(b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")

    def close(self):
        self.socket.close()  # connections are refused from now on


class RecordingWatch(PeerWatch):
    """A PeerWatch whose exit is recorded, not taken."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.exited, self.code, self.line = threading.Event(), None, None

    def _exit(self, code, line):
        self.code, self.line = code, line() if callable(line) else line
        self.exited.set()
        threading.Event().wait()  # as a real exit, never returns (a daemon thread, left asleep)


def write_checkpoint(model_dir, step, final_step):
    (model_dir / f"model.ckpt-{step}.index").write_bytes(b"")
    (model_dir / "checkpoint").write_text(f'model_checkpoint_path: "model.ckpt-{step}"\n')
    (model_dir / PROGRESS_FILE).write_text(json.dumps({"task": "fashion", "runs": [
        {"start_step": 0, "images_at_start": 0, "global_batch": 256, "max_steps": final_step}]}))


@pytest.mark.parametrize("checkpoint_step, expected_code", [(801, 0), (780, PEER_LOST_EXIT)])
def test_a_ps_ends_0_when_the_chief_goes_after_its_final_checkpoint_and_200_before_it(
        tmp_path, checkpoint_step, expected_code):
    chief, worker = FakeServer(), FakeServer()
    cluster = ClusterTask("ps", 0, 2, {"chief": [chief.address], "worker": [worker.address], "ps": ["127.0.0.1:1"]})
    write_checkpoint(tmp_path, checkpoint_step, final_step=800)
    watch = RecordingWatch(cluster, str(tmp_path), timeout_secs=2,  # probes every 0.5 s
                           finished=lambda: training_finished(str(tmp_path))).start()
    try:
        while not all(watch._seen.values()):  # noqa: SLF001 - both peers answered once
            threading.Event().wait(0.05)
        worker.close()  # the worker ends first at the end of training, and the chief next,
        chief.close()  # before its results.json exists (the old test of the end: never true here)
        assert watch.exited.wait(30), "the watch never ended the ps"
    finally:
        chief.close()
        worker.close()
    assert not (tmp_path / "results.json").exists()
    assert watch.code == expected_code, watch.line
    if expected_code:
        assert "lost worker 0" in watch.line or "lost chief 0" in watch.line
    else:
        assert "training finished and every trainer ended" in watch.line


def test_a_chief_whose_final_checkpoint_lands_as_it_loses_a_worker_does_not_end_200(tmp_path):
    # In CI the chief wrote its final checkpoint in the same second as it judged its killed worker
    # lost, and ended 200. Here training counts as finished from the second look of one round on:
    # the final checkpoint lands between the watch's first look and its verdict.
    worker = FakeServer()
    cluster = ClusterTask("chief", 0, 2, {"chief": ["127.0.0.1:1"], "worker": [worker.address]})
    looks = []

    def finished():
        looks.append(time.monotonic())
        return len(looks) > 1 and looks[-1] - looks[-2] < 0.1  # two looks within one round of probes

    watch = RecordingWatch(cluster, str(tmp_path), timeout_secs=2, finished=finished).start()  # every 0.5 s
    try:
        while not all(watch._seen.values()):  # noqa: SLF001 - the worker answered once
            threading.Event().wait(0.05)
        worker.close()
        assert not watch.exited.wait(5), watch.line
    finally:
        worker.close()
    assert len(looks) >= 2 and looks[-1] - looks[-2] < 0.1  # the verdict looked again, and let the chief go on


def watch_a_worker_that_ends(tmp_path, stop_signal, stop_taken, wait_secs=10):
    """A chief's watch of a worker that answers once and then ends; returns the watch once it has
    exited (or `wait_secs` passed)."""
    worker = FakeServer()
    cluster = ClusterTask("chief", 0, 2, {"chief": ["127.0.0.1:1"], "worker": [worker.address]})
    write_checkpoint(tmp_path, 40, final_step=800)
    watch = RecordingWatch(cluster, str(tmp_path), timeout_secs=2, stop_signal=stop_signal,  # probes every 0.5 s
                           stop_taken=stop_taken).start()
    try:
        while not all(watch._seen.values()):  # noqa: SLF001 - the worker answered once
            threading.Event().wait(0.05)
        worker.close()
        watch.exited.wait(wait_secs)
    finally:
        worker.close()
    return watch


def test_a_task_asked_to_stop_whose_step_waits_for_a_lost_peer_ends_as_its_stop_not_200(tmp_path):
    # The signal came (its handler waits: the main thread is inside the step), no step took the stop.
    watch = watch_a_worker_that_ends(tmp_path, stop_signal=lambda: signal.SIGTERM, stop_taken=lambda: False)
    assert watch.exited.is_set() and watch.code == 143, watch.line
    assert watch.line == (f"stopped by SIGTERM; worker 0 at {watch.peers['worker 0']} refuses connections, and "
                          f"this task waited for it inside TensorFlow: the latest checkpoint, model.ckpt-40, is kept "
                          f"in {tmp_path}: run the same command to resume")


def test_a_task_ending_by_its_own_stop_is_not_ended_for_a_peer_that_ends_too(tmp_path):
    watch = watch_a_worker_that_ends(tmp_path, stop_signal=lambda: signal.SIGTERM, stop_taken=lambda: True,
                                     wait_secs=5)
    assert not watch.exited.is_set(), watch.line


def test_a_task_not_asked_to_stop_ends_200_when_a_peer_is_lost(tmp_path):
    watch = watch_a_worker_that_ends(tmp_path, stop_signal=lambda: None, stop_taken=lambda: False)
    assert watch.code == PEER_LOST_EXIT and "lost worker 0" in watch.line, watch.line


def test_training_is_finished_at_the_recorded_final_step_or_past_it(tmp_path):
    assert not training_finished(str(tmp_path))  # nothing yet
    write_checkpoint(tmp_path, 800, final_step=800)
    assert training_finished(str(tmp_path)) and training_finished(str(tmp_path), max_steps=800)
    assert not training_finished(str(tmp_path), max_steps=1000)
    write_checkpoint(tmp_path, 801, final_step=1000)  # a resumed run to 1000 recorded its final step
    assert not training_finished(str(tmp_path))


def test_a_ps_ends_0_after_training_finished_though_one_trainer_never_answered_it(tmp_path):
    # A chief whose whole run fell between two of the ps's probes (or a task relaunched onto a finished
    # model dir, which ends at once) was never seen: the ps waited for it for ever.
    worker = FakeServer()
    never = socket.socket()
    never.bind(("127.0.0.1", 0))  # bound, not listening: refuses connections
    cluster = ClusterTask("ps", 0, 2, {"chief": [f"127.0.0.1:{never.getsockname()[1]}"], "worker": [worker.address],
                                       "ps": ["127.0.0.1:1"]})
    write_checkpoint(tmp_path, 800, final_step=800)
    watch = RecordingWatch(cluster, str(tmp_path), timeout_secs=2,
                           finished=lambda: training_finished(str(tmp_path))).start()
    try:
        while not watch._seen["worker 0"]:  # noqa: SLF001
            threading.Event().wait(0.05)
        assert not watch.exited.wait(1.5), watch.line  # a trainer answers: the ps serves
        worker.close()
        assert watch.exited.wait(30), "the watch never ended the ps"
    finally:
        worker.close()
        never.close()
    assert not watch._seen["chief 0"]  # noqa: SLF001
    assert watch.code == 0 and "training finished and every trainer ended" in watch.line, watch.line


def refusing_cluster():
    """Returns (the ps's ClusterTask of a chief and a worker that refuse connections, their sockets to close)."""
    refusing = []
    for _ in range(2):
        never = socket.socket()
        never.bind(("127.0.0.1", 0))  # bound, not listening: refuses connections
        refusing.append(never)
    chief, worker = (f"127.0.0.1:{never.getsockname()[1]}" for never in refusing)
    return ClusterTask("ps", 0, 2, {"chief": [chief], "worker": [worker], "ps": ["127.0.0.1:1"]}), refusing


def ps_watch(cluster, model_dir):
    from pipeline.cluster_run import _lock_taken_and_released_since
    time.sleep(0.05)  # (the lock file's clock: a whole run later than the model dir's own files)
    return RecordingWatch(cluster, str(model_dir), timeout_secs=2, finished=lambda: training_finished(str(model_dir)),
                          chief_came_and_went=_lock_taken_and_released_since(str(model_dir), time.time())).start()


def test_a_ps_relaunched_onto_a_finished_model_dir_ends_0_once_its_chief_came_and_went(tmp_path):
    # Its chief reprinted (or wrote the report alone) and its workers had nothing to train: none started a
    # server, and the ps, having seen none, served until the scheduler's time limit.
    from pipeline import model_dir as model_dir_lib
    cluster, refusing = refusing_cluster()
    write_checkpoint(tmp_path, 800, final_step=800)
    with model_dir_lib.locked(str(tmp_path)):  # the run that finished
        pass
    watch = ps_watch(cluster, tmp_path)
    try:
        assert not watch.exited.wait(2), watch.line  # no chief yet: one that will train may still be starting
        with model_dir_lib.locked(str(tmp_path)):  # the chief reprints under the model dir's lock
            assert not watch.exited.wait(2), watch.line
        assert watch.exited.wait(30), "the watch never ended the ps"
    finally:
        for never in refusing:
            never.close()
    assert watch.code == 0, watch.line
    assert "training had finished, and the chief came and went without training" in watch.line, watch.line


def test_a_ps_waits_for_a_chief_that_will_train_on_a_finished_model_dir(tmp_path):
    """A relaunch with a higher --max-steps: the final step on record is reached until the chief records the new
    one, under the model dir's lock; a ps that ended meanwhile left the chief waiting for it (exit 200)."""
    from pipeline import model_dir as model_dir_lib
    cluster, refusing = refusing_cluster()
    write_checkpoint(tmp_path, 800, final_step=800)
    watch = ps_watch(cluster, tmp_path)
    try:
        assert not watch.exited.wait(2), watch.line  # the chief's pod still waits for a node, say
        with model_dir_lib.locked(str(tmp_path)):
            assert not watch.exited.wait(2), watch.line
            write_checkpoint(tmp_path, 800, final_step=1600)  # it records its final step, then trains
        assert not watch.exited.wait(3), watch.line  # (a chief that trains starts its server: seen from then)
    finally:
        for never in refusing:
            never.close()


def test_the_run_holding_a_model_dir_is_read_from_its_lock(tmp_path):
    from pipeline import model_dir as model_dir_lib
    assert model_dir_lib.run_holding(str(tmp_path)) is None
    with model_dir_lib.locked(str(tmp_path)):
        assert f"pid {os.getpid()}" in model_dir_lib.run_holding(str(tmp_path))
    assert model_dir_lib.run_holding(str(tmp_path)) is None


class OnceLateServer(FakeServer):
    """A FakeServer whose second answer comes `late_secs` late, as from a server a loaded machine stalled a moment."""

    def __init__(self, late_secs):
        self.late_secs, self.answered = late_secs, 0
        super().__init__()

    def _answer(self, connection):
        self.answered += 1
        if self.answered == 2:
            time.sleep(self.late_secs)
        try:
            super()._answer(connection)
        except OSError:  # the probe gave up on this answer
            pass


@pytest.mark.parametrize("late_secs", [0, 0.8])
def test_a_ps_asked_to_stop_serves_until_the_chief_has_ended_then_ends_as_its_stop(tmp_path, late_secs):
    """Its handler never runs (a ps serves inside TensorFlow's C++): it waited for SIGKILL. A chief's answer later
    than the probe's timeout (0.5 s here; its server stalled a moment on a loaded machine) ended it while the
    chief still answered."""
    chief, worker = OnceLateServer(late_secs), FakeServer()
    cluster = ClusterTask("ps", 0, 2, {"chief": [chief.address], "worker": [worker.address], "ps": ["127.0.0.1:1"]})
    write_checkpoint(tmp_path, 40, final_step=800)
    watch = RecordingWatch(cluster, str(tmp_path), timeout_secs=2, stop_signal=lambda: signal.SIGTERM,
                           finished=lambda: training_finished(str(tmp_path))).start()
    try:
        assert not watch.exited.wait(2), watch.line  # the chief's last checkpoint reads its variables
        assert chief.answered >= 3
        worker.close()
        assert not watch.exited.wait(2), watch.line  # the chief still answers
        chief.close()
        assert watch.exited.wait(30), "the watch never ended the ps"
    finally:
        chief.close()
        worker.close()
    assert watch.code == 143, watch.line
    assert watch.line == (f"stopped by SIGTERM; ps 0 served until the chief, which saves the checkpoints, had "
                          f"ended: the latest checkpoint, model.ckpt-40, is kept in {tmp_path}: run the same command "
                          "to resume")


def test_a_parameter_server_worker_at_its_end_waits_for_the_final_checkpoint_while_the_chief_answers(tmp_path):
    from pipeline.cluster_run import finished_check, wait_for_final_checkpoint
    chief = FakeServer()
    cluster = ClusterTask("worker", 0, 2, {"chief": [chief.address], "worker": ["127.0.0.1:1"]})
    write_checkpoint(tmp_path, 160, final_step=200)  # the chief validates the checkpoint of step 160
    settings = SimpleNamespace(model_dir=str(tmp_path), stop_at_accuracy=None, patience=None, min_delta=0.0)
    finished, waited = finished_check(settings, 200), []
    waiting = threading.Thread(target=lambda: waited.append(wait_for_final_checkpoint(cluster, finished)))
    waiting.start()
    try:
        waiting.join(3)
        assert waiting.is_alive()  # no time limit: the chief answers, and its validation may take minutes
        write_checkpoint(tmp_path, 201, final_step=200)
        waiting.join(10)
        assert waited == [True]
        write_checkpoint(tmp_path, 160, final_step=200)
        finished = finished_check(settings, 200)
        chief.close()  # a chief that has gone: no checkpoint is coming
        assert wait_for_final_checkpoint(cluster, finished) is False
    finally:
        chief.close()
        waiting.join(10)


class RecordingClusterWatch(ClusterWatch):
    """A ClusterWatch whose exit is recorded, not taken."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.exited, self.code, self.line = threading.Event(), None, None

    def _exit(self, code, line):
        self.code, self.line = code, line
        self.exited.set()
        threading.Event().wait()


@pytest.mark.parametrize("session_started", [False, True])
def test_a_task_asked_to_stop_while_waiting_for_its_cluster_ends_as_its_stop_unless_it_trains(
        tmp_path, session_started):
    # Inside TensorFlow's session creation Python's handler never runs: the task waited for SIGKILL.
    cluster = ClusterTask("worker", 0, 2, {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"]})
    asked = []
    watch = RecordingClusterWatch(cluster, 600, str(tmp_path), every_secs=10,
                                  stop_signal=lambda: asked[0] if asked else None).start()
    if session_started:
        watch.started()
    asked.append(signal.SIGTERM)
    asked_at = time.monotonic()
    if session_started:  # the training hook takes the stop after its step, saving a checkpoint
        assert not watch.exited.wait(HANDLER_GRACE_SECS + 2), watch.line
        return
    assert watch.exited.wait(HANDLER_GRACE_SECS + 5), "the watch never ended the task"
    assert time.monotonic() - asked_at >= HANDLER_GRACE_SECS  # the handler's own chance first
    assert watch.code == 143
    assert watch.line == ("stopped by SIGTERM while waiting for the cluster to start, before this task's first "
                          f"step: no checkpoint was written in {tmp_path} yet")


@pytest.mark.parametrize("trained_before, step", [(False, None), (False, 0), (True, 40)])
def test_a_cluster_that_does_not_start_ends_1_the_first_time_and_retryable_on_a_relaunch(tmp_path, trained_before,
                                                                                         step):
    """A task missing at the first launch is a launch to mend (exit 1; a parameter_server chief's step-0 checkpoint
    is no training); after a relaunch (the model dir has trained) it is more likely a pod waiting for a node, which
    Kubeflow's ExitCode policy gave up on at 1."""
    cluster = ClusterTask("worker", 0, 2, {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"]})
    if step is not None:
        write_checkpoint(tmp_path, step, final_step=800)
    watch = RecordingClusterWatch(cluster, 1, str(tmp_path), every_secs=0.3).start()
    assert watch.exited.wait(10), "the watch never ended the task"
    assert watch.code == (PEER_LOST_EXIT if trained_before else 1), watch.line
    assert "the cluster did not start within 1 s (no answer from chief 0 at 127.0.0.1:1" in watch.line, watch.line
    assert ("exit 200, retryable" in watch.line) == trained_before, watch.line


def test_a_process_start_is_read_from_proc_before_its_imports():
    import subprocess
    import sys
    before = time.time()
    started = float(subprocess.run([sys.executable, "-c", "import time; time.sleep(1.5); "
                                    "from pipeline.cluster_run import process_started_at; print(process_started_at())"],
                                   capture_output=True, text=True, check=True).stdout)
    assert before - 1.5 < started < before + 1.0  # (whole seconds of boot time), not the 1.5 s and imports later


def test_a_worker_whose_chief_is_lost_before_its_final_checkpoint_ends_200_in_one_line(capsys):
    """It returned from its wait and ended 0 ('worker finished'): a TFJob never restarts such a pod."""
    import argparse
    from pipeline.cli import run_command
    from pipeline.errors import PeerLostError

    def work(args):
        raise PeerLostError("lost chief 0 at 127.0.0.1:1 before its final checkpoint; worker 0 ends (exit 200, "
                            "retryable)")
    assert run_command(argparse.ArgumentParser(prog="train_fashion.py"), work, []) == PEER_LOST_EXIT
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "train_fashion.py: error: lost chief 0 at 127.0.0.1:1 before its final checkpoint; worker 0 ends (exit 200, "
        "retryable)")
