import glob

import tensorflow as tf

from hooks.profiler import DeferredProfilerHook


def test_it_is_built_outside_a_graph_and_writes_timelines_inside_one(tmp_path):
    hook = DeferredProfilerHook(save_steps=2, output_dir=str(tmp_path))  # eager here: must not fail
    with tf.Graph().as_default():
        global_step = tf.compat.v1.train.get_or_create_global_step()
        train_op = tf.compat.v1.assign_add(global_step, 1)
        with tf.compat.v1.train.MonitoredSession(hooks=[hook]) as session:
            for _ in range(5):
                session.run(train_op)
    assert glob.glob(str(tmp_path / "timeline-*.json"))
