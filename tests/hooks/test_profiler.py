import glob
import types

import pytest
import tensorflow as tf
from tensorflow.python.training import training_util

from hooks.profiler import DeferredProfilerHook
from pipeline.run_setup import _profiler_warning


def increment_after_read():
    """Returns the op adding 1 to the global step after the read the hooks fetch (as TF's training ops do):
    a bare assign_add raced that read, and the hook then saw one step twice ("The provided tag was already
    used", once in a full run of the suite)."""
    return training_util._increment_global_step(1)


def test_it_is_built_outside_a_graph_and_writes_timelines_inside_one(tmp_path):
    hook = DeferredProfilerHook(save_steps=2, output_dir=str(tmp_path))  # eager here: must not fail
    with tf.Graph().as_default():
        tf.compat.v1.train.get_or_create_global_step()
        train_op = increment_after_read()
        with tf.compat.v1.train.MonitoredSession(hooks=[hook]) as session:
            for _ in range(5):
                session.run(train_op)
    assert glob.glob(str(tmp_path / "timeline-*.json"))


@pytest.mark.parametrize("every, steps", [(4, 3), (4, 4), (3, 5), (100, 4), (1, 1), (2, 1), (1, 2)])
def test_the_run_is_warned_exactly_when_the_hook_will_trace_no_step(tmp_path, every, steps):
    """A 4-step run with --hooks profiler and the default --log-steps wrote no timeline, without a word."""
    hook = DeferredProfilerHook(save_steps=every, output_dir=str(tmp_path))
    start = 10  # a resumed run: the first trace comes `every` steps after its start
    with tf.Graph().as_default():
        tf.compat.v1.get_variable(  # as restored from a checkpoint of step `start`
            "global_step", initializer=tf.constant(start, tf.int64), trainable=False,
            collections=[tf.compat.v1.GraphKeys.GLOBAL_VARIABLES, tf.compat.v1.GraphKeys.GLOBAL_STEP])
        train_op = increment_after_read()
        with tf.compat.v1.train.MonitoredSession(hooks=[hook]) as session:
            for _ in range(steps):
                session.run(train_op)
    traced = glob.glob(str(tmp_path / "timeline-*.json"))
    setup = types.SimpleNamespace(start_step=start, max_steps=start + steps,
                                  settings=types.SimpleNamespace(hooks=["examples_per_second", "profiler"],
                                                                 log_steps=every, eval_only=False))
    warning = _profiler_warning(setup)
    assert bool(traced) == (warning is None), (traced, warning)
    if warning:
        fix = "train 2 steps or more" if steps == 1 else f"pass --log-steps {steps} or fewer"
        assert warning == (f"--hooks profiler traces one step every --log-steps ({every}) steps, never a run's first, "
                           f"and this run trains {steps}: it will write no timeline; {fix}")
    setup.settings.eval_only = True  # the same flags with --eval-only: it trains nothing
    assert _profiler_warning(setup) is None
    setup.settings.eval_only = False
    setup.settings.hooks = ["examples_per_second"]
    assert _profiler_warning(setup) is None
