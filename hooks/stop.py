"""SessionRunHooks that end training cleanly when asked to (a stop signal, a stop every task of a
cluster agreed on), and one that calls back between steps."""
import logging
import signal

import numpy as np
import tensorflow as tf

from hooks.stepping import StepCountingHook

log = logging.getLogger(__name__)
# The stop signals a trainer's request can carry through the all-reduce (pipeline.signals catches them; another,
# SIGHUP, travels as SIGTERM: the last slot).
AGREED_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_REQUESTS, _AGREED = "stop_agreement_requests", "stop_agreement_agreed"


def add_stop_agreement(train_op):
    """Returns `train_op` grouped with an all-reduce of this replica's stop request; for a model_fn
    under multi_worker_mirrored, in its replica context. Every step then sums the requests of every
    trainer (a count per signal of AGREED_SIGNALS, fed by StopOnRequestHook: zeros unless fed), so
    each trainer learns from the same step that one of them was asked to stop. No variable: the
    checkpoints are those of the model without it."""
    requests = tf.compat.v1.placeholder_with_default(tf.zeros([len(AGREED_SIGNALS)]), [len(AGREED_SIGNALS)],
                                                     name="stop_requests")
    agreed = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, requests)
    tf.compat.v1.add_to_collection(_REQUESTS, requests)
    tf.compat.v1.add_to_collection(_AGREED, agreed)
    return tf.group(train_op, agreed)


class StopOnRequestHook(tf.estimator.SessionRunHook):
    """Requests the session to stop after the step during which `should_stop()` became true.

    The session then ends as at the final step: the Estimator's checkpoint saver
    writes a checkpoint of the step reached, so a resumed run loses nothing.
    `stopped_at_step` is the global step reached, or None if no stop was requested.

    In a graph with the stop agreement (add_stop_agreement: synchronous trainers of a cluster, every
    step an all-reduce over all of them) the request is fed to the next step instead, as the signal
    `signal_received()` returns, and every trainer stops after the first step whose all-reduced
    requests are not all zero: all after the same step, so none waits in a collective for a trainer
    that has ended (the chief's checkpoint is that step's). A trainer that stops so without a request
    of its own calls `on_agreed(signum)` (`agreed_signal` is then that signal). `after_stop(step)`, if
    given, is called at the end of a session that stopped (after an agreed step, or, without the
    agreement, after its own request).
    """

    def __init__(self, should_stop, signal_received=None, on_agreed=None, after_stop=None):
        self._should_stop = should_stop
        self._signal_received = signal_received or (lambda: signal.SIGTERM if should_stop() else None)
        self._on_agreed, self._after_stop = on_agreed, after_stop
        self._global_step = self._requests = self._agreed = None
        self.stopped_at_step = self.agreed_signal = None

    def begin(self):
        self._global_step = tf.compat.v1.train.get_global_step()
        self._requests = tf.compat.v1.get_collection(_REQUESTS)
        agreed = tf.compat.v1.get_collection(_AGREED)
        self._agreed = agreed[0] if agreed else None  # each replica's sum is the same

    def before_run(self, run_context):
        if self._agreed is None:
            return None
        request = np.zeros(len(AGREED_SIGNALS), np.float32)
        signum = self._signal_received()
        if signum is not None:
            request[AGREED_SIGNALS.index(signum) if signum in AGREED_SIGNALS else -1] = 1
        return tf.compat.v1.train.SessionRunArgs(self._agreed, feed_dict={r: request for r in self._requests})

    def after_run(self, run_context, run_values):
        if self._agreed is None:
            stop = self._should_stop()
        else:
            counts = run_values.results
            stop = bool(np.any(counts > 0))
            if stop and self._signal_received() is None:  # another trainer's signal
                self.agreed_signal = AGREED_SIGNALS[int(np.argmax(counts))]
                log.info("another trainer of the cluster was stopped by %s: this one stops after the same step",
                         signal.Signals(self.agreed_signal).name)
                if self._on_agreed is not None:
                    self._on_agreed(self.agreed_signal)
        if stop:
            self.stopped_at_step = int(run_context.session.run(self._global_step))
            run_context.request_stop()

    def end(self, session):
        if self.stopped_at_step is not None and self._after_stop is not None:
            self._after_stop(self.stopped_at_step)


class SessionStartedHook(tf.estimator.SessionRunHook):
    """Calls `callback()` once the training session exists (after its creation and restore)."""

    def __init__(self, callback):
        self._callback = callback

    def after_create_session(self, session, coord):
        self._callback()


class StopAtAgreedStepHook(StepCountingHook):
    """Requests the session to stop after its first step that ends at or past the global step
    `agreed_step()` returns (None: no stop agreed yet; it is called after every step, so keep it
    cheap). With one agreed step, every synchronous trainer of a cluster stops after the same step.
    `stopped_at_step` is the global step reached, or None."""

    def __init__(self, agreed_step):
        super().__init__()
        self._agreed_step = agreed_step
        self.stopped_at_step = None

    def before_run(self, run_context):
        return self.step_args()

    def after_run(self, run_context, run_values):
        self.count_step(run_values)
        step = self._agreed_step()
        if step is not None and self.global_step >= step:
            self.stopped_at_step = self.global_step
            run_context.request_stop()


class BetweenStepsHook(StepCountingHook):
    """Calls `callback(global_step)` before each run, with the global step the runs so far reached
    (checkpoints of that step are written by then: the checkpoint saver runs after the last run)."""

    def __init__(self, callback):
        super().__init__()
        self._callback = callback

    def before_run(self, run_context):
        self._callback(self.global_step)
        return self.step_args()

    def after_run(self, run_context, run_values):
        self.count_step(run_values)
