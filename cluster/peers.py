"""A lost or hung peer ends this task, so that a scheduler restarts the whole cluster.

TensorFlow's collectives cannot take a process back once they are aborted, and
the Estimator's MonitoredSession answers a peer's failure by building a new
session, which fails again, about 7 times a second, for ever; a stopped peer
(`kill -STOP`, a network partition) blocks every other task without an error at
all. So each task watches its peers here and, when one is lost, ends with one
line naming it and the checkpoint a relaunch resumes from, and PEER_LOST_EXIT.

A peer is probed at the gRPC level: TCP connect, then the HTTP/2 preface, to which
a live TensorFlow server answers with its SETTINGS frame at once, whatever its
Python thread is doing. A killed task refuses the connection; a stopped or cut-off
one accepts it (the kernel does) or not, but never answers.
"""
import logging
import os
import re
import signal
import socket
import sys
import threading
import time

# Kubeflow's ExitCode restart policy retries 128-255 and gives up on 1-127; 129-192 read as
# "killed by signal N" (128 + N) to shells and schedulers, so the code is above them.
PEER_LOST_EXIT = 200
DEFAULT_PEER_TIMEOUT_SECS = 60
REFUSED = "refuses connections"

log = logging.getLogger(__name__)
_HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # + empty SETTINGS
_SETTINGS_FRAME = 0x04
# What the Estimator's MonitoredSession logs before it builds a new session after a failed step.
_RECOVERY = re.compile(r"[Aa] new session will be created")


def probe(address, timeout=2.0):
    """Returns None when a gRPC server answers at host:port `address` within `timeout` seconds,
    else why not: 'refuses connections', 'does not answer', or the network error."""
    host, port = address.rsplit(":", 1)
    try:
        connection = socket.create_connection((host, int(port)), timeout=timeout)
    except ConnectionRefusedError:
        return REFUSED
    except socket.timeout:
        return "does not answer"
    except OSError as e:
        return e.strerror or str(e)
    with connection:
        try:
            connection.sendall(_HTTP2_PREFACE)
            header = connection.recv(9)
        except socket.timeout:
            return "does not answer"
        except OSError as e:
            return e.strerror or str(e)
    if len(header) < 4 or header[3] != _SETTINGS_FRAME:
        return "closed the connection" if not header else "is not a TensorFlow server"
    return None


def peers_of(cluster):
    """Returns {label: address} of the tasks whose loss ends this one: for a trainer, every other
    task of the cluster; for a parameter server, the trainers; for the evaluator, the chief."""
    jobs = {"chief": ("chief", "worker", "ps"), "worker": ("chief", "worker", "ps"), "ps": ("chief", "worker"),
            "evaluator": ("chief",)}[cluster.task_type]
    return {f"{job} {i}": address for job in jobs for i, address in enumerate(cluster.addresses.get(job, []))
            if (job, i) != (cluster.task_type, cluster.index)}


class PeerWatch:
    """A daemon thread probing this task's peers every few seconds.

    A peer that has answered once and then fails every probe for `timeout_secs`
    (two probes when it refuses connections) is lost: unless `finished()`
    (training reached its final step, so the peer ended on its own), the process
    writes one line to stderr and exits with PEER_LOST_EXIT. A parameter server,
    which cannot tell a worker that finished from a lost one, waits for the
    chief's loss and names the task that failed first; TensorFlow never ends it,
    so it exits 0 once training has finished and every trainer is gone (one it
    never saw answer included), and 128 + N once a stop signal N has come and the
    chief is gone (see _end_parameter_server).
    `session_recreated()` is for the Estimator's answer to a failed peer: it ends
    the task at once (see recovery_filter).

    A stop signal to this task comes first: once `stop_signal()` returns one (the task was asked
    to stop, even if its main thread, waiting inside TensorFlow, has not handled it yet), a lost
    peer is no error of the cluster's. While `stop_taken()` is false (no step boundary has taken
    the stop: the main thread waits in a step the lost peer will never join) the task ends as its
    stop would, naming the latest checkpoint, with 128 + the signal; once it is true the task is
    ending by itself, and the watch leaves it to that.
    """

    def __init__(self, cluster, model_dir, timeout_secs=DEFAULT_PEER_TIMEOUT_SECS, finished=lambda: False,
                 prog=None, stop_signal=lambda: None, stop_taken=lambda: False, chief_came_and_went=lambda: False):
        self.cluster, self.model_dir, self.timeout_secs, self.finished = cluster, model_dir, timeout_secs, finished
        self.stop_signal, self.stop_taken = stop_signal, stop_taken
        self.chief_came_and_went = chief_came_and_went
        self.prog = prog or os.path.basename(sys.argv[0])
        self.peers = peers_of(cluster)
        self.every_secs = max(0.5, min(5.0, timeout_secs / 4))
        self._seen = {label: False for label in self.peers}
        self._failing_since, self._warned = {}, set()
        self._failed_last_round = set()
        self._exiting = threading.Lock()
        self.running = False

    def start(self):
        """Starts watching; returns self."""
        self.running = True
        threading.Thread(target=self._watch, daemon=True, name="peer-watch").start()
        return self

    def _watch(self):
        while True:
            now = time.monotonic()
            failures = {}
            reasons = {label: probe(address, timeout=min(2.0, self.every_secs))
                       for label, address in self.peers.items()}
            for label, reason in reasons.items():
                if reason is None:
                    self._seen[label] = True
                    self._failing_since.pop(label, None)
                elif self._seen[label]:
                    failures[label] = reason
                    self._failing_since.setdefault(label, now)
            if self.cluster.task_type == "ps":
                self._end_parameter_server(reasons)
                self._failed_last_round = {label for label, reason in reasons.items() if reason}
            if failures and self.finished():  # training is over: peers that end are done, not lost
                if self.cluster.task_type != "ps":
                    return
                time.sleep(self.every_secs)
                continue
            if failures and self.stop_signal() is not None and self.stop_taken():
                time.sleep(self.every_secs)  # this task ends by its own stop: peers that end too are no loss
                continue
            for label in failures:
                if label not in self._warned:
                    self._warned.add(label)
                    log.warning("%s at %s %s; this task ends unless it answers again", label, self.peers[label],
                                failures[label])
            self._warned &= set(failures)
            # A refused connection means nothing listens there any more: the task is gone, not slow.
            lost = [label for label in failures if now - self._failing_since[label] >= (
                min(self.timeout_secs, 2 * self.every_secs) if failures[label] == REFUSED else self.timeout_secs)]
            if self.cluster.task_type == "ps":
                # Workers end on their own before the chief at the end of training, and the chief
                # watches them: its loss decides, and the first task to fail is named.
                lost = sorted(failures, key=self._failing_since.get) if "chief 0" in lost else []
            if lost and self.finished():  # the final checkpoint was written since the check above
                continue
            if lost:
                self.lost(lost[0], failures[lost[0]])
            time.sleep(self.every_secs)

    def _end_parameter_server(self, reasons):
        """Ends this parameter server when its work is done, by this round's probes (`reasons`, by peer): training
        finished and no trainer answers (exit 0; trainers it never saw count too, as one relaunched onto a
        finished model dir ends at once; when none ever answered, once `chief_came_and_went()`), or a stop
        signal came and the chief, which writes the checkpoints from the variables a ps holds, no longer
        answers (128 + N: a ps serves inside TensorFlow's C++, where Python's handler never runs). Returns
        otherwise."""
        me = f"ps {self.cluster.index}"
        if all(reasons.values()) and any(self._seen.values()) and self.finished():
            self._exit(0, f"{me}: training finished and every trainer ended; stopping this parameter server")
        if all(reasons.values()) and not any(self._seen.values()) and self.chief_came_and_went() and self.finished():
            # A relaunch onto a finished model dir: its chief reprinted or wrote the report alone, its workers had
            # nothing to train, and none started a server.
            self._exit(0, f"{me}: training had finished, and the chief came and went without training; stopping "
                          "this parameter server")
        signum = self.stop_signal()
        # The chief seen answering has ended once it fails two rounds in a row: one answer later than the probe's
        # timeout (its server stalled a moment on a loaded machine) ended the ps while the chief still read its
        # variables for the stop's checkpoint.
        chief_gone = reasons.get("chief 0") and ("chief 0" in self._failed_last_round or not self._seen["chief 0"])
        if signum is not None and chief_gone:
            self._exit(128 + signum, lambda: f"stopped by {signal.Signals(signum).name}; {me} served until the "
                                             f"chief, which saves the checkpoints, had ended: "
                                             f"{self.describe_kept_checkpoint()}")

    def recovery_filter(self):
        """Returns a logging.Filter for TensorFlow's logger that calls session_recreated() when the
        MonitoredSession says it will build a new session, once the watch runs (while the cluster
        starts, TensorFlow retries sessions as its peers come up)."""
        watch = self

        class _OnRecovery(logging.Filter):
            def filter(self, record):
                if watch.running and _RECOVERY.search(str(record.msg)):
                    watch.session_recreated()
                return True
        return _OnRecovery()

    def session_recreated(self):
        """Ends the task, naming the peer that fails a probe now (TensorFlow rebuilds a session
        only after a peer's failure; collectives cannot go on after one). After the final step it
        lets TensorFlow go on: the session only has to end."""
        if self.finished():
            return
        failing = {label: probe(address, timeout=2.0) for label, address in self.peers.items()}
        failing = {label: reason for label, reason in failing.items() if reason is not None}
        for label in sorted(failing, key=lambda label: not self._seen[label]):  # those known alive before first
            self.lost(label, failing[label], rebuilding=True)
        self.lost(None, "failed (TensorFlow aborted the step); every peer answers again now", rebuilding=True)

    def lost(self, label, reason, rebuilding=False):
        """Writes the one line for the loss of peer `label` and exits with PEER_LOST_EXIT; or, when
        this task was asked to stop, ends it as its stop (see the class), and returns once the stop
        was taken, unless TensorFlow is `rebuilding` the session (it cannot go on then either)."""
        peer = f"{label} at {self.peers[label]} {reason}" if label else f"a peer {reason}"
        signum = self.stop_signal()
        if signum is not None:
            if self.stop_taken() and not rebuilding:
                return
            self._exit(128 + signum, lambda: f"stopped by {signal.Signals(signum).name}; {peer}, and this task "
                                             f"waited for it inside TensorFlow: {self.describe_kept_checkpoint()}")
        self._exit(PEER_LOST_EXIT, lambda: f"error: {lost_peer_line(peer, self.cluster, self.model_dir)}")

    def describe_kept_checkpoint(self):
        """Returns what a stopped task says of the checkpoint a relaunch resumes from."""
        return kept_checkpoint(self.model_dir)

    def _exit(self, code, line):
        """Writes `line` (or what calling it returns, at the end) to stderr and exits with `code`."""
        with self._exiting:  # the watch thread and the main thread's log filter may both get here
            # Other survivors may be probing now to name the lost task: this one's server answers a
            # little longer, so that they do not name it instead.
            time.sleep(min(3.0, self.every_secs))
            sys.stdout.flush()
            sys.stderr.write(f"{self.prog}: {line() if callable(line) else line}\n")
            sys.stderr.flush()
            os._exit(code)  # the main thread may be blocked inside TensorFlow: nothing else ends it


def lost_peer_line(peer, cluster, model_dir):
    """Returns the line (without 'error: ') of this task of `cluster` ending on the loss of `peer` (its words:
    'chief 0 at host:port refuses connections'): exit PEER_LOST_EXIT, and the checkpoint in `model_dir` a
    relaunch of every task resumes from."""
    import tensorflow as tf  # noqa: PLC0415 - loaded long before a peer can be lost
    latest = tf.train.latest_checkpoint(model_dir) or f"scratch (no checkpoint in {model_dir} yet)"
    return (f"lost {peer}; {cluster.task_type} {cluster.index} ends (exit {PEER_LOST_EXIT}, retryable). Relaunch "
            f"every task of the cluster with the same command: it resumes from {latest}")


def kept_checkpoint(model_dir):
    """Returns what a task stopped from a watch's thread says of the checkpoint in `model_dir` a relaunch
    resumes from (as pipeline.cli says it after a stop)."""
    import tensorflow as tf  # noqa: PLC0415 - loaded long before a watch ends a task
    latest = tf.train.latest_checkpoint(model_dir)
    if latest is None:
        return f"no checkpoint was written in {model_dir} yet"
    return f"the latest checkpoint, {os.path.basename(latest)}, is kept in {model_dir}: run the same command to resume"
