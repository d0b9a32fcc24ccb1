"""Starts a TF_CONFIG cluster of local processes on 127.0.0.1 and supervises it.

Every task runs the same command with its own TF_CONFIG; their output is
streamed with a task prefix, and with `log_dir` also kept whole in one file per task, which ends
with the task's exit code. When a task fails, every process started here is
stopped; parameter servers, which never exit on their own, are stopped once the
training tasks and the evaluator are done. An evaluator that dies is warned about
once; training goes on. One still evaluating `evaluator_grace_secs` after training
ended is stopped, and the launch still succeeds.

No task outlives the launcher: SIGINT, SIGTERM and SIGHUP are passed on to every
task (which checkpoints and ends), SIGKILL follows after `grace_secs`. Should the
launcher itself be killed, each task's end of a pipe, the lifeline, reads
end-of-file, and the task stops itself (cluster.lifeline).
"""
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

from cluster.lifeline import GRACE_VARIABLE, LIFELINE_VARIABLE

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
DEFAULT_GRACE_SECS = 30


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

    def __init__(self, command, workers, ps=0, evaluator=False, out=None, evaluator_grace_secs=300,
                 grace_secs=DEFAULT_GRACE_SECS, environ=None, log_dir=None):
        self.command, self.out, self.log_dir = command, out or sys.stdout, log_dir
        self.tasks = cluster_tasks(workers, ps, evaluator)
        self.evaluator_grace_secs, self.grace_secs = evaluator_grace_secs, grace_secs
        self.environ = dict(os.environ if environ is None else environ)
        self.processes, self._streams = {}, {}
        self._lock = threading.Lock()
        self._received = []
        self._reader_gone = False

    def ports(self):
        """Returns the TCP ports the cluster's tasks listen on, as TF_CONFIG assigns them."""
        cluster = self.tasks[0][1]["cluster"]
        return [int(address.rsplit(":", 1)[1]) for addresses in cluster.values() for address in addresses]

    def say(self, label, line):
        """Writes task `label`'s `line`, prefixed; once the output's reader has gone (`... | head`), nothing:
        the cluster runs on to its end (its tasks write to this launcher, not to that pipe)."""
        with self._lock:
            if self._reader_gone:
                return
            try:
                self.out.write(f"[{label}] {line.rstrip()}\n")
                self.out.flush()
            except BrokenPipeError:
                self._reader_gone = True
                if self.out is sys.stdout:  # Python flushes it again at exit, into the closed pipe
                    devnull = os.open(os.devnull, os.O_WRONLY)
                    os.dup2(devnull, sys.stdout.fileno())
                    os.close(devnull)

    def log_path(self, label):
        """Returns the file that keeps task `label`'s output (with `log_dir`), as 'worker_0.log'."""
        return os.path.join(self.log_dir, f"{label.replace(' ', '_')}.log")

    def _stream(self, label, process):
        if self.log_dir is None:
            for line in process.stdout:
                self.say(label, line)
            return
        with open(self.log_path(label), "w") as log:
            for line in process.stdout:
                log.write(line)
                log.flush()
                self.say(label, line)
            log.write(f"[launcher] {label} {_describe_exit(process.wait())}\n")

    def start(self):
        """Starts every task, each in a process group of its own (a terminal's Ctrl-C reaches the
        launcher alone, which passes it on once); returns {label: Popen}."""
        if self.log_dir is not None:
            os.makedirs(self.log_dir, exist_ok=True)
        lifeline, self._lifeline = os.pipe()  # the write end stays here: its close is the launcher's death
        try:
            for label, tf_config in self.tasks:
                env = dict(self.environ, TF_CONFIG=json.dumps(tf_config), PYTHONUNBUFFERED="1")
                env.update({LIFELINE_VARIABLE: str(lifeline), GRACE_VARIABLE: f"{self.grace_secs:g}"})
                process = subprocess.Popen(
                    self.command, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT, text=True, errors="replace", pass_fds=(lifeline,),
                    process_group=0)
                self.processes[label] = process
                self._streams[label] = threading.Thread(target=self._stream, args=(label, process), daemon=True)
                self._streams[label].start()
                self.say("launcher", f"started {label} (pid {process.pid})")
        finally:
            os.close(lifeline)
        return self.processes

    def stop(self, labels=None, signum=signal.SIGTERM, grace_secs=10, trainers_decide=False):
        """Sends `signum` to the given (default: all) processes still running, and SIGKILL to those
        still running `grace_secs` later (at once on a second stop signal; with `trainers_decide`, as
        soon as the chief and the workers have ended); returns the labels killed."""
        running = {label: p for label, p in self.processes.items()
                   if (labels is None or label in labels) and p.poll() is None}
        for p in running.values():
            p.send_signal(signum)
        deadline, signals_before = time.monotonic() + grace_secs, len(self._received)
        trainers = [p for label, p in running.items() if label == "chief" or label.startswith("worker")]
        while any(p.poll() is None for p in running.values()) and time.monotonic() < deadline \
                and len(self._received) == signals_before \
                and not (trainers_decide and all(p.poll() is not None for p in trainers)):
            time.sleep(0.1)
        killed = [label for label, p in running.items() if p.poll() is None]
        for label in killed:
            running[label].kill()
        for p in running.values():
            p.wait()
        self._drain()
        return killed

    def _drain(self, timeout_secs=10):
        """Waits (up to `timeout_secs` in all) until the output of every ended task is passed on:
        a task's last lines, its stop line say, may still be in its pipe when it has ended."""
        deadline = time.monotonic() + timeout_secs
        for label, thread in self._streams.items():
            if self.processes[label].poll() is not None:
                thread.join(max(0.0, deadline - time.monotonic()))

    def run(self):
        """Starts the cluster and waits for it; returns 0 when the chief, the workers and the
        evaluator all succeed, 1 when any task fails, 128 + the signal after SIGINT, SIGTERM or
        SIGHUP (each task stopped as the signal's handling says, see pass_on); a SIGHUP the launcher
        was started ignoring (`nohup`) stays ignored."""
        previous = {}
        try:
            for signum in STOP_SIGNALS:
                if signum == signal.SIGHUP and signal.getsignal(signum) is signal.SIG_IGN:
                    continue  # `nohup`: the cluster outlives the terminal (its tasks inherit the ignored SIGHUP)
                previous[signum] = signal.signal(signum, lambda signum, frame: self._received.append(signum))
        except ValueError:  # not the main thread: the caller handles signals
            pass
        try:
            self.start()
            return self._supervise()
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            if getattr(self, "_lifeline", None) is not None:
                os.close(self._lifeline)
                self._lifeline = None

    def pass_on(self, signum):
        """Passes stop signal `signum` on to every task (SIGHUP as SIGTERM, which the jobs catch):
        each checkpoints at its next step and ends; SIGKILL follows `grace_secs` later, or at a
        second signal. Returns 128 + `signum`, the launcher's exit code."""
        forward = signal.SIGINT if signum == signal.SIGINT else signal.SIGTERM
        self.say("launcher", f"{signal.Signals(signum).name} received: passing {forward.name} on to every task, "
                             f"which checkpoints and ends; SIGKILL to any still running after {self.grace_secs:g} s")
        # Parameter servers and the evaluator wait inside TensorFlow's C++, where Python's signal handler
        # never runs, and keep nothing the chief's checkpoint lacks: they end with the trainers.
        killed = self.stop(signum=forward, grace_secs=self.grace_secs, trainers_decide=True)
        helpers = [label for label in killed if label.startswith("ps") or label == "evaluator"]
        if helpers and len(helpers) == len(killed):
            self.say("launcher", f"stopped {', '.join(helpers)} (SIGKILL) once training had ended: they keep no "
                                 "state of their own")
        elif killed:
            self.say("launcher", f"killed {', '.join(killed)} (SIGKILL): still running after the grace period or "
                                 "a second signal; the newest whole checkpoint is kept")
        self.say("launcher", "every task has ended")
        return 128 + signum

    def _supervise(self):
        must_finish = [label for label, _ in self.tasks if not label.startswith("ps")]
        trainers_done_at = None
        while True:
            if self._received:
                return self.pass_on(self._received[0])
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
                    # Training and its report are whole: as with an evaluator that died, the launch succeeded.
                    self.say("launcher", f"the evaluator was still running {self.evaluator_grace_secs:g} s after "
                                         "training ended; stopping it (training finished: the chief's results "
                                         "and report are whole, the last checkpoint may lack its evaluation)")
                    self.stop()
                    return 0
            time.sleep(0.2)
