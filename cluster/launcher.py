"""Starts a TF_CONFIG cluster of local processes on 127.0.0.1 and supervises it.

Every task runs the same command with its own TF_CONFIG; their output is
streamed with a task prefix. When a task fails, or on Ctrl-C, every process
started here is stopped; parameter servers, which never exit on their own, are
stopped once the training tasks and the evaluator are done. An evaluator that dies is
warned about once; training goes on.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time


def free_ports(count):
    """Returns `count` TCP ports on 127.0.0.1 that were free a moment ago."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def cluster_tasks(workers, ps=0, evaluator=False):
    """Returns [(label, TF_CONFIG dict)] for a chief, `workers` more workers, `ps` parameter
    servers and optionally an evaluator (which, as TF requires, is not in the cluster)."""
    ports = iter(free_ports(1 + workers + ps))
    cluster = {"chief": [f"127.0.0.1:{next(ports)}"]}
    if workers:
        cluster["worker"] = [f"127.0.0.1:{next(ports)}" for _ in range(workers)]
    if ps:
        cluster["ps"] = [f"127.0.0.1:{next(ports)}" for _ in range(ps)]
    tasks = [("chief", {"cluster": cluster, "task": {"type": "chief", "index": 0}})]
    tasks += [(f"worker {i}", {"cluster": cluster, "task": {"type": "worker", "index": i}}) for i in range(workers)]
    tasks += [(f"ps {i}", {"cluster": cluster, "task": {"type": "ps", "index": i}}) for i in range(ps)]
    if evaluator:
        tasks.append(("evaluator", {"cluster": cluster, "task": {"type": "evaluator", "index": 0}}))
    return tasks


def _describe_exit(code):
    if code < 0:
        return f"was killed by {signal.Signals(-code).name}"
    return f"exited with code {code}"


def _advice(code):
    """Returns what to do after a task ended with `code`: exit 1 and 2 are the jobs' own one-line
    errors (a bad flag, bad data, a missing dataset), which running again does not fix."""
    if code in (1, 2):
        return "fix what its error line above says, then run the command again"
    return "run the same command again to resume from the chief's latest checkpoint"


class LocalCluster:
    """The processes of one local cluster; `run()` supervises them and returns the exit code."""

    def __init__(self, command, workers, ps=0, evaluator=False, out=None, evaluator_grace_secs=300):
        self.command, self.out = command, out or sys.stdout
        self.tasks = cluster_tasks(workers, ps, evaluator)
        self.evaluator_grace_secs = evaluator_grace_secs
        self.processes = {}
        self._lock = threading.Lock()

    def say(self, label, line):
        with self._lock:
            self.out.write(f"[{label}] {line.rstrip()}\n")
            self.out.flush()

    def _stream(self, label, process):
        for line in process.stdout:
            self.say(label, line)

    def start(self):
        """Starts every task; returns {label: Popen}."""
        for label, tf_config in self.tasks:
            env = dict(os.environ, TF_CONFIG=json.dumps(tf_config), PYTHONUNBUFFERED="1")
            process = subprocess.Popen(self.command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                       text=True, errors="replace")
            self.processes[label] = process
            threading.Thread(target=self._stream, args=(label, process), daemon=True).start()
            self.say("launcher", f"started {label} (pid {process.pid})")
        return self.processes

    def stop(self, labels=None):
        """Stops the given (default: all) processes still running: SIGTERM, then SIGKILL after 10 s."""
        running = [p for label, p in self.processes.items()
                   if (labels is None or label in labels) and p.poll() is None]
        for p in running:
            p.terminate()
        deadline = time.monotonic() + 10
        for p in running:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def run(self):
        """Starts the cluster and waits for it; returns 0 when the chief, the workers and the
        evaluator all succeed, 1 when any task fails, 130 on Ctrl-C."""
        self.start()
        must_finish = [label for label, _ in self.tasks if not label.startswith("ps")]
        trainers_done_at = None
        try:
            while True:
                for label, process in self.processes.items():
                    code = process.poll()
                    if label == "evaluator" and code not in (None, 0):
                        if label in must_finish:  # evaluations are a view on training, not part of it
                            self.say("launcher", f"the evaluator {_describe_exit(code)}; training goes on "
                                                 "without it")
                            must_finish.remove(label)
                        continue
                    # A parameter server ends by itself only once training has finished (cluster.peers).
                    ps_early = code == 0 and label.startswith("ps") and self.processes["chief"].poll() != 0
                    if code not in (None, 0) or ps_early:
                        self.say("launcher", f"{label} {_describe_exit(code)}; stopping the cluster. "
                                             f"{_advice(code)[0].upper()}{_advice(code)[1:]}")
                        self.stop()
                        return 1
                if all(self.processes[label].poll() == 0 for label in must_finish):
                    self.stop()  # the parameter servers
                    self.say("launcher", "all tasks finished")
                    return 0
                if all(self.processes[l].poll() == 0 for l in must_finish if l != "evaluator"):
                    trainers_done_at = trainers_done_at or time.monotonic()
                    if time.monotonic() - trainers_done_at > self.evaluator_grace_secs:
                        self.say("launcher", "the evaluator did not finish after training ended; stopping it")
                        self.stop()
                        return 1
                time.sleep(0.2)
        except KeyboardInterrupt:
            self.say("launcher", "interrupted; stopping every task")
            self.stop()
            return 130
