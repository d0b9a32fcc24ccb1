"""SessionRunHooks that end training cleanly when asked to (a stop signal, a stop every task of a
cluster agreed on), and one that calls back between steps."""
import tensorflow as tf

from hooks.stepping import StepCountingHook


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
