"""A SessionRunHook that ends training cleanly when asked to (e.g. by a stop signal)."""
import tensorflow as tf


class StopOnRequestHook(tf.estimator.SessionRunHook):
    """Requests the session to stop after the step during which `should_stop()` became true.

    The session then ends as at the final step: the Estimator's checkpoint saver
    writes a checkpoint of the step reached, so a resumed run loses nothing.
    `stopped_at_step` is the global step reached, or None if no stop was requested.
    """

    def __init__(self, should_stop):
        self._should_stop = should_stop
        self._global_step = None
        self.stopped_at_step = None

    def begin(self):
        self._global_step = tf.compat.v1.train.get_global_step()

    def after_run(self, run_context, run_values):
        if self._should_stop():
            self.stopped_at_step = int(run_context.session.run(self._global_step))
            run_context.request_stop()


class SessionStartedHook(tf.estimator.SessionRunHook):
    """Calls `callback()` once the training session exists (after its creation and restore)."""

    def __init__(self, callback):
        self._callback = callback

    def after_create_session(self, session, coord):
        self._callback()
