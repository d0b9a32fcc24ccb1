"""Hooks read the global step where other workers advance it (variables on a parameter server)."""
import tensorflow as tf
from tensorflow.python.training import training_util

from cluster.launcher import free_ports
from hooks.progress import ProgressHook
from hooks.stepping import OwnStepsHook


def test_hooks_read_the_global_step_that_other_workers_advance_on_a_parameter_server():
    ps_port, worker_port = free_ports(2)
    cluster = tf.train.ClusterSpec({"ps": [f"127.0.0.1:{ps_port}"], "worker": [f"127.0.0.1:{worker_port}"]})
    tf.distribute.Server(cluster, job_name="ps", task_index=0)
    worker = tf.distribute.Server(cluster, job_name="worker", task_index=0)
    with tf.Graph().as_default():
        with tf.device("/job:ps/task:0"):
            step = tf.compat.v1.train.get_or_create_global_step()
        with tf.device("/job:worker/task:0"):
            read = training_util._get_or_create_global_step_read()  # noqa: SLF001 - as the Estimator's model_fn
            with tf.control_dependencies([read]):
                train = tf.compat.v1.assign_add(step, 1)
            others = tf.compat.v1.assign_add(step, 10)  # another worker's 10 steps
        hook = ProgressHook(max_steps=100, global_batch_size=1, every_n_steps=5)
        own = OwnStepsHook("worker 0")
        creator = tf.compat.v1.train.ChiefSessionCreator(master=worker.target)
        with tf.compat.v1.train.MonitoredSession(session_creator=creator, hooks=[hook, own]) as session, \
                tf.compat.v1.Session(worker.target) as other_worker:
            session.run(train)
            assert hook.asynchronous and hook.global_step == 1
            other_worker.run(others)
            session.run(train)
            session.run(train)
    assert hook.global_step == 13  # counting its own steps, it would say 3
    assert (own.steps, own.first_global_step, own.global_step) == (3, 1, 13)  # its share: 3 of 13
    assert [line.split(" (")[0] for line in hook.lines] == ["step 12/100"]  # the first multiple of 5 passed


def test_a_global_step_this_worker_alone_advances_is_counted_without_a_fetch():
    with tf.Graph().as_default():
        step = tf.compat.v1.train.get_or_create_global_step()
        train = tf.compat.v1.assign_add(step, 1)
        hook = ProgressHook(max_steps=100, global_batch_size=1, every_n_steps=5)
        with tf.compat.v1.train.MonitoredSession(hooks=[hook]) as session:
            for _ in range(3):
                session.run(train)
    assert not hook.asynchronous and hook.global_step == 3
