"""Watching a TF_CONFIG cluster come together: who has not answered yet, and when to give up.

A task whose peers never start waits inside TensorFlow's C++ session creation,
where it neither logs nor answers SIGTERM. A thread here probes every address
of the cluster, logs the tasks that do not answer yet, and after `wait_secs`
without a training session ends the process with one line; a stop signal
ends it too (nothing of its own is trained yet).
"""
import logging
import os
import signal
import socket
import sys
import threading
import time

import tensorflow as tf

from cluster.peers import PEER_LOST_EXIT, kept_checkpoint

log = logging.getLogger(__name__)


def answers(address, timeout=1.0):
    """Returns True when something accepts TCP connections at host:port `address`."""
    host, port = address.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            return True
    except OSError:
        return False


# How long a stop signal is left to the main thread's own handler, which runs when the thread is in Python.
HANDLER_GRACE_SECS = 3.0


class ClusterWatch:
    """A daemon thread that waits for `started()` (the first training session; for the
    evaluator, the first checkpoint in `model_dir`), logging every `every_secs` which
    tasks do not answer, and exits the process after `wait_secs` (see _give_up), or with
    128 + N once `stop_signal()` has returned signal N for HANDLER_GRACE_SECS."""

    def __init__(self, cluster, wait_secs, model_dir, every_secs=10.0, prog=None, stop_signal=lambda: None):
        self.cluster, self.wait_secs, self.model_dir, self.every_secs = cluster, wait_secs, model_dir, every_secs
        self.prog = prog or os.path.basename(sys.argv[0])
        self.stop_signal = stop_signal
        self._started = threading.Event()
        self._stop_seen = None

    def start(self):
        """Starts watching; returns self."""
        threading.Thread(target=self._watch, daemon=True, name="cluster-watch").start()
        return self

    def started(self):
        """Marks the cluster as up: training has a session."""
        self._started.set()

    def silent_tasks(self):
        """Returns 'job index at host:port' for each task of the cluster that does not answer."""
        return [f"{job} {i} at {address}" for job, addresses in self.cluster.addresses.items()
                for i, address in enumerate(addresses) if not answers(address)]

    def _watch(self):
        deadline = time.monotonic() + self.wait_secs
        next_look = time.monotonic() + self.every_secs
        while not self._started.wait(min(1.0, self.every_secs)):
            self._end_if_stopped()
            if time.monotonic() < next_look:
                continue
            next_look += self.every_secs
            if self.cluster.task_type == "evaluator" and tf.train.latest_checkpoint(self.model_dir):
                return
            silent = self.silent_tasks()
            waited = self.wait_secs - max(0.0, deadline - time.monotonic())
            missing = f"no answer from {', '.join(silent)}" if silent else "every task answers, no session yet"
            if time.monotonic() >= deadline:
                self._give_up(missing)
            log.info("waiting for the cluster to start: %s (%.0f of %g s)", missing, waited, self.wait_secs)

    def _give_up(self, missing):
        """Ends the process: exit 1 for a cluster that never trained in the model dir (an address or a task
        missing from the launch, which a restart does not mend), PEER_LOST_EXIT for one that has (a relaunch,
        where a peer still pending, say for a node, comes later: schedulers restart on it)."""
        latest = tf.train.latest_checkpoint(self.model_dir)
        if latest is None or latest.endswith("-0"):  # (a parameter_server chief saves step 0 as its session starts)
            self._exit(1, f"error: the cluster did not start within {self.wait_secs:g} s ({missing}); start "
                          "every task TF_CONFIG lists, or raise --cluster-wait-secs")
        self._exit(PEER_LOST_EXIT, f"error: the cluster did not start within {self.wait_secs:g} s ({missing}), "
                                   "though it has trained in this model dir: a task may still wait for a node, or "
                                   f"have ended (see its log); this one ends (exit {PEER_LOST_EXIT}, retryable): "
                                   "relaunch every task, or raise --cluster-wait-secs")

    def _end_if_stopped(self):
        """Ends the process, waiting for its cluster, when a stop signal came HANDLER_GRACE_SECS ago."""
        signum = self.stop_signal()
        if signum is None:
            return
        self._stop_seen = self._stop_seen or time.monotonic()
        if time.monotonic() - self._stop_seen >= HANDLER_GRACE_SECS and not self._started.is_set():
            self._exit(128 + signum, f"stopped by {signal.Signals(signum).name} while waiting for the cluster to "
                                     f"start, before this task's first step: {kept_checkpoint(self.model_dir)}")

    def _exit(self, code, line):
        """Writes `line` to stderr and exits with `code`."""
        sys.stdout.flush()
        sys.stderr.write(f"{self.prog}: {line}\n")
        sys.stderr.flush()
        os._exit(code)  # the main thread is blocked inside TensorFlow: nothing else ends it
