"""Watching a TF_CONFIG cluster come together: who has not answered yet, and when to give up.

A task whose peers never start waits inside TensorFlow's C++ session creation,
where it neither logs nor answers SIGTERM. A thread here probes every address
of the cluster, logs the tasks that do not answer yet, and after `wait_secs`
without a training session ends the process with one line.
"""
import logging
import os
import socket
import sys
import threading
import time

import tensorflow as tf

log = logging.getLogger(__name__)


def answers(address, timeout=1.0):
    """Returns True when something accepts TCP connections at host:port `address`."""
    host, port = address.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            return True
    except OSError:
        return False


class ClusterWatch:
    """A daemon thread that waits for `started()` (the first training session; for the
    evaluator, the first checkpoint in `model_dir`), logging every `every_secs` which
    tasks do not answer, and exits the process with code 1 after `wait_secs`."""

    def __init__(self, cluster, wait_secs, model_dir, every_secs=10.0, prog=None):
        self.cluster, self.wait_secs, self.model_dir, self.every_secs = cluster, wait_secs, model_dir, every_secs
        self.prog = prog or os.path.basename(sys.argv[0])
        self._started = threading.Event()

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
        while not self._started.wait(self.every_secs):
            if self.cluster.task_type == "evaluator" and tf.train.latest_checkpoint(self.model_dir):
                return
            silent = self.silent_tasks()
            waited = self.wait_secs - max(0.0, deadline - time.monotonic())
            missing = f"no answer from {', '.join(silent)}" if silent else "every task answers, no session yet"
            if time.monotonic() >= deadline:
                sys.stderr.write(f"{self.prog}: error: the cluster did not start within {self.wait_secs:g} s "
                                 f"({missing}); start every task TF_CONFIG lists, or raise --cluster-wait-secs\n")
                sys.stderr.flush()
                os._exit(1)  # the main thread is blocked inside TensorFlow: nothing else ends it
            log.info("waiting for the cluster to start: %s (%.0f of %g s)", missing, waited, self.wait_secs)
