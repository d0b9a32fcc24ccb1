"""The launcher's supervision, with stand-in commands instead of training."""
import io
import json
import os
import subprocess
import sys
import time

from cluster.launcher import LocalCluster, cluster_tasks
from tests.conftest import ROOT

# A stand-in task: reads its TF_CONFIG, prints it, then acts as ACTIONS says for its type.
STAND_IN = """
import json, os, sys, time
task = json.loads(os.environ["TF_CONFIG"])["task"]
print("I am", task["type"], task["index"], flush=True)
action = json.loads(sys.argv[1]).get(task["type"], "ok")
if action.startswith("exit "):
    sys.exit(int(action.split()[1]))
if action == "forever":
    time.sleep(600)
if action.startswith("sleep "):
    time.sleep(float(action.split()[1]))
"""


def stand_in(actions):
    return [sys.executable, "-c", STAND_IN, json.dumps(actions)]


def test_cluster_tasks_describe_one_cluster_on_distinct_free_ports():
    tasks = cluster_tasks(workers=2, ps=1, evaluator=True)
    assert [label for label, _ in tasks] == ["chief", "worker 0", "worker 1", "ps 0", "evaluator"]
    cluster = tasks[0][1]["cluster"]
    assert all(config["cluster"] == cluster for _, config in tasks)
    addresses = cluster["chief"] + cluster["worker"] + cluster["ps"]
    assert len(set(addresses)) == 4 and all(a.startswith("127.0.0.1:") for a in addresses)
    assert "evaluator" not in cluster and tasks[-1][1]["task"] == {"type": "evaluator", "index": 0}


def test_success_streams_prefixed_output_and_stops_the_parameter_servers():
    out = io.StringIO()
    cluster = LocalCluster(stand_in({"ps": "forever"}), workers=1, ps=1, out=out)
    start = time.monotonic()
    assert cluster.run() == 0
    assert time.monotonic() - start < 30
    text = out.getvalue()
    assert "[chief] I am chief 0" in text and "[worker 0] I am worker 0" in text and "[ps 0] I am ps 0" in text
    assert "[launcher] all tasks finished" in text
    assert all(p.poll() is not None for p in cluster.processes.values())


def test_a_failing_task_stops_the_others_and_fails_the_launch():
    out = io.StringIO()
    cluster = LocalCluster(stand_in({"worker": "exit 3", "chief": "forever"}), workers=1, out=out)
    start = time.monotonic()
    assert cluster.run() == 1
    assert time.monotonic() - start < 30  # the chief was stopped, not waited for
    assert "[launcher] worker 0 exited with code 3; stopping the cluster. Run the same command again to resume" \
        in out.getvalue()
    assert cluster.processes["chief"].poll() is not None


def test_a_task_that_reported_bad_input_gets_no_resume_advice():
    for code in (1, 2):  # the jobs' exit codes for bad data and for a bad flag
        out = io.StringIO()
        assert LocalCluster(stand_in({"chief": f"exit {code}", "worker": "forever"}), workers=1, out=out).run() == 1
        assert (f"[launcher] chief exited with code {code}; stopping the cluster. Fix what its error line above "
                "says, then run the command again") in out.getvalue()
        assert "resume" not in out.getvalue()


def test_a_dead_evaluator_is_warned_about_once_and_training_goes_on():
    out = io.StringIO()
    cluster = LocalCluster(stand_in({"evaluator": "exit 3", "chief": "sleep 3", "worker": "sleep 3"}), workers=1,
                           evaluator=True, out=out)
    assert cluster.run() == 0
    text = out.getvalue()
    assert text.count("[launcher] the evaluator exited with code 3; training goes on without it") == 1, text
    assert "[launcher] all tasks finished" in text


def test_an_evaluator_still_running_after_its_grace_is_stopped_and_the_launch_succeeds():
    out = io.StringIO()
    cluster = LocalCluster(stand_in({"evaluator": "forever"}), workers=1, evaluator=True, out=out,
                           evaluator_grace_secs=1)
    started = time.monotonic()
    assert cluster.run() == 0, out.getvalue()  # 1 before: training had succeeded
    assert time.monotonic() - started < 60 and cluster.processes["evaluator"].poll() is not None
    assert "[launcher] the evaluator was still running 1 s after training ended; stopping it" in out.getvalue()


def test_a_parameter_server_may_end_by_itself_once_the_chief_has_finished():
    out = io.StringIO()
    assert LocalCluster(stand_in({"ps": "sleep 3", "worker": "sleep 6"}), workers=1, ps=1, out=out).run() == 0
    early = io.StringIO()
    assert LocalCluster(stand_in({"chief": "forever"}), workers=0, ps=1, out=early).run() == 1
    assert "[launcher] ps 0 exited with code 0; stopping the cluster" in early.getvalue()


def test_each_tasks_output_is_kept_in_a_file_of_its_own_ending_with_its_exit_code(tmp_path):
    out = io.StringIO()
    cluster = LocalCluster(stand_in({"worker": "exit 3", "chief": "forever"}), workers=1, out=out,
                           log_dir=str(tmp_path / "logs"))
    assert cluster.run() == 1
    assert (tmp_path / "logs" / "worker_0.log").read_text() == "I am worker 0\n[launcher] worker 0 exited with code 3\n"
    chief = (tmp_path / "logs" / "chief.log").read_text()
    assert chief.endswith("[launcher] chief was killed by SIGTERM\n"), chief  # stopped, maybe before its line
    assert "[worker 0] I am worker 0" in out.getvalue()  # streamed as before


class SlowOut(io.StringIO):
    """An output that takes a millisecond a line, as a busy terminal or pipe may."""

    def write(self, text):
        time.sleep(0.001)
        return super().write(text)


def test_the_last_lines_of_a_task_are_passed_on_before_the_launcher_returns():
    # A task's last lines (its stop line, say) may still be in its pipe when the launcher sees it has ended.
    lines = "[print('line', i, 'x' * 200) for i in range(2000)]; print('the last line', flush=True)"
    out = SlowOut()
    assert LocalCluster([sys.executable, "-c", lines], workers=1, out=out).run() == 0
    assert out.getvalue().count("the last line") == 2, out.getvalue()[-500:]


def test_a_reader_that_stops_reading_leaves_the_cluster_to_finish_and_the_launch_succeeds():
    """`launch_local_cluster.py ... | head`: the streaming threads died in tracebacks and the launcher exited 1
    after a run that finished."""
    chatty = [sys.executable, "-c", "for i in range(20000): print('line', i)"]
    launcher = subprocess.Popen([sys.executable, os.path.join(ROOT, "scripts", "launch_local_cluster.py"),
                                 "--workers", "1", "--", *chatty],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        head = [launcher.stdout.readline() for _ in range(3)]
        launcher.stdout.close()  # as head does after its lines
        err = launcher.stderr.read()
        launcher.wait(timeout=120)
    finally:
        launcher.kill()
    assert all(line.startswith("[") for line in head), head
    assert launcher.returncode == 0, err[-2000:]
    assert "Traceback" not in err and "error" not in err, err[-2000:]
