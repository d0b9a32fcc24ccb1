"""A ProfilerHook that can be built before the Estimator's graph exists."""
import tensorflow as tf


class DeferredProfilerHook(tf.estimator.SessionRunHook):
    """Writes Chrome-trace timelines (timeline-<step>.json) every `save_steps` steps.

    tf.estimator.ProfilerHook opens a TF 1 summary writer in its constructor,
    which fails in eager mode, i.e. anywhere outside the Estimator's graph; this
    hook builds it in begin(), inside the graph, and forwards every call to it.
    """

    def __init__(self, save_steps, output_dir):
        self._args = {"save_steps": save_steps, "output_dir": output_dir}
        self._hook = None

    def begin(self):
        self._hook = tf.estimator.ProfilerHook(**self._args)
        self._hook.begin()

    def after_create_session(self, session, coord):
        self._hook.after_create_session(session, coord)

    def before_run(self, run_context):
        return self._hook.before_run(run_context)

    def after_run(self, run_context, run_values):
        self._hook.after_run(run_context, run_values)

    def end(self, session):
        self._hook.end(session)
