"""The launcher script with stand-in tasks: the cluster's own network namespace, the fallback that
needs --allow-network, and stop signals passed on to every task (real processes and signals)."""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from cluster.isolation import NO_ISOLATION_VARIABLE, interfaces, namespace
from tests.conftest import ROOT, alive, default_sighup

LAUNCHER = os.path.join(ROOT, "scripts", "launch_local_cluster.py")
# A stand-in task: says where it runs, then, on SIGTERM, writes STOPPED-<pid> into the folder it
# is given and exits 143, unless told to ignore the signal (all, or the ps tasks and the evaluator).
STAND_IN = """
import json, os, signal, sys, time
sys.path.insert(0, {root!r})
from cluster.isolation import interfaces, namespace
print("where", namespace(), ",".join(interfaces()), os.environ.get("LOCAL_CLUSTER_ISOLATED"), flush=True)
def stop(signum, frame):
    open(os.path.join(sys.argv[1], f"STOPPED-{{os.getpid()}}-{{signal.Signals(signum).name}}"), "w").close()
    sys.exit(128 + signum)
task = json.loads(os.environ["TF_CONFIG"])["task"]["type"]
ignore = sys.argv[2] == "ignore" or (sys.argv[2] == "ignore-unless-training" and task in ("ps", "evaluator"))
signal.signal(signal.SIGTERM, signal.SIG_IGN if ignore else stop)
signal.signal(signal.SIGINT, stop)
print("ready", flush=True)
time.sleep(float(sys.argv[3]))
"""


def stand_in(folder, on_term="stop", secs=600):
    return [sys.executable, "-c", STAND_IN.format(root=ROOT), str(folder), on_term, str(secs)]


def start(flags, command, env=None):
    return subprocess.Popen([sys.executable, LAUNCHER, *flags, "--", *command], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=dict(os.environ, **(env or {})),
                            preexec_fn=default_sighup)


def wait_ready(launcher, tasks):
    """Reads the launcher's output until `tasks` stand-ins are ready; returns (lines, task pids)."""
    lines, pids = [], []
    for line in launcher.stdout:
        lines.append(line)
        match = re.match(r"\[launcher\] started .* \(pid (\d+)\)", line)
        pids += [int(match.group(1))] if match else []
        if sum(line.endswith("] ready\n") for line in lines) == tasks:
            return lines, pids
    raise AssertionError("".join(lines) + launcher.stderr.read())


def test_the_tasks_share_one_network_namespace_whose_only_interface_is_lo(tmp_path):
    result = subprocess.run([sys.executable, LAUNCHER, "--workers", "1", "--", *stand_in(tmp_path, secs=0)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    places = set(re.findall(r"\] where (\S+) (\S+) (\S+)", result.stdout))
    assert len(places) == 1, result.stdout  # chief and worker: one namespace
    net, names, isolated = places.pop()
    assert net != namespace() and names == "lo" and isolated == "1"
    assert interfaces() != ["lo"]  # this machine's own namespace has more: the test means something
    assert re.search(r"\[launcher\] the cluster has a network of its own, reachable only from its tasks "
                     r"\(TCP ports \d+, \d+ on its loopback\)", result.stdout)


def test_without_a_namespace_the_launcher_names_the_open_ports_and_needs_allow_network(tmp_path):
    env = dict(os.environ, **{NO_ISOLATION_VARIABLE: "1"})
    refused = subprocess.run([sys.executable, LAUNCHER, "--workers", "1", "--", *stand_in(tmp_path, secs=0)],
                             capture_output=True, text=True, timeout=60, env=env)
    assert refused.returncode == 1 and "started" not in refused.stdout
    line, = refused.stderr.strip().splitlines()
    assert re.fullmatch(r"launch_local_cluster.py: error: the cluster is NOT isolated \(.*\): its tasks listen on "
                        r"every interface of this machine at TCP ports \d+, \d+, .*; pass --allow-network to run "
                        r"it anyway.*", line), line
    allowed = subprocess.run([sys.executable, LAUNCHER, "--allow-network", "--workers", "1", "--",
                              *stand_in(tmp_path, secs=0)], capture_output=True, text=True, timeout=60, env=env)
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr
    assert re.search(r"warning: the cluster is NOT isolated .* at TCP ports \d+, \d+", allowed.stderr)
    assert set(re.findall(r"\] where (\S+) \S+ (\S+)", allowed.stdout)) == {(namespace(), "None")}


def test_sighup_and_sigterm_reach_every_task_and_sigkill_follows_the_grace_period(tmp_path):
    for signum, on_term in ((signal.SIGHUP, "stop"), (signal.SIGTERM, "ignore")):
        folder = tmp_path / signum.name
        folder.mkdir()
        launcher = start(["--workers", "1", "--grace-secs", "2"], stand_in(folder, on_term))
        lines, pids = wait_ready(launcher, 2)
        sent = time.monotonic()  # before the signal: the launcher's grace period starts after it has come
        os.kill(launcher.pid, signum)
        out, err = launcher.communicate(timeout=60)
        assert launcher.returncode == 128 + signum, out + err
        assert not any(alive(pid) for pid in pids)
        stopped = sorted(name.split("-")[2] for name in os.listdir(folder))
        if on_term == "stop":  # SIGHUP is passed on as SIGTERM, which the jobs catch
            assert stopped == ["SIGTERM", "SIGTERM"] and "killed" not in out
        else:  # tasks that ignore it are killed once the grace period is over, not before
            assert stopped == [] and time.monotonic() - sent >= 2
            assert "[launcher] killed chief, worker 0 (SIGKILL): still running after the grace period" in out
        assert f"[launcher] {signum.name} received: passing SIGTERM on to every task" in out
        assert out.rstrip().endswith("[launcher] every task has ended")


def test_a_launcher_started_under_nohup_outlives_the_terminal_s_sighup(tmp_path):
    launcher = subprocess.Popen([sys.executable, LAUNCHER, "--workers", "1", "--grace-secs", "2", "--",
                                 *stand_in(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))  # as nohup does
    lines, pids = wait_ready(launcher, 2)
    os.kill(launcher.pid, signal.SIGHUP)
    for pid in pids:
        os.kill(pid, signal.SIGHUP)  # a closed terminal hangs up its whole session
    time.sleep(1.0)
    assert launcher.poll() is None and all(alive(pid) for pid in pids) and os.listdir(tmp_path) == []
    os.kill(launcher.pid, signal.SIGTERM)
    out, err = launcher.communicate(timeout=60)
    assert launcher.returncode == 143 and "SIGHUP" not in out, out + err
    assert len(os.listdir(tmp_path)) == 2


def test_parameter_servers_and_the_evaluator_are_stopped_once_the_trainers_have_ended(tmp_path):
    # Stand-ins for tasks blocked inside TensorFlow's C++ (they never see SIGTERM), beside trainers
    # that stop on it: the launcher ends them with the trainers, not after the grace period.
    launcher = start(["--workers", "1", "--ps", "1", "--evaluator", "--grace-secs", "60"],
                     stand_in(tmp_path, "ignore-unless-training"))
    lines, pids = wait_ready(launcher, 4)
    os.kill(launcher.pid, signal.SIGTERM)
    sent = time.monotonic()
    out, err = launcher.communicate(timeout=120)
    assert launcher.returncode == 143 and time.monotonic() - sent < 60, out + err
    assert "[launcher] stopped ps 0, evaluator (SIGKILL) once training had ended" in out, out
    assert len(os.listdir(tmp_path)) == 2  # the chief and the worker stopped on their SIGTERM
    assert not any(alive(pid) for pid in pids)


def test_without_root_the_namespace_is_made_inside_a_user_namespace_that_maps_the_user_to_itself():
    if os.getuid() != 0 or not os.path.exists("/usr/bin/setpriv"):
        pytest.skip("needs root and setpriv to become an unprivileged user")
    # The unprivileged user may not read the checkout (CI clones into a private temporary folder):
    # it imports the module from a copy it can read.
    readable = tempfile.mkdtemp(prefix="isolation-")
    try:
        os.chmod(readable, 0o755)
        shutil.copy(os.path.join(ROOT, "cluster", "isolation.py"), readable)
        os.chmod(os.path.join(readable, "isolation.py"), 0o644)
        probe = ("import sys; sys.path.insert(0, sys.argv[1]); import os; "
                 "from isolation import isolate_network, interfaces; "
                 "print(isolate_network(), interfaces(), open('/proc/self/uid_map').read().split(), os.getuid())")
        result = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all",
                                 sys.executable, "-c", probe, readable], capture_output=True, text=True, timeout=60)
    finally:
        shutil.rmtree(readable, ignore_errors=True)
    assert result.stdout.split("\n")[0] == "None ['lo'] ['65534', '65534', '1'] 65534", result.stdout + result.stderr
