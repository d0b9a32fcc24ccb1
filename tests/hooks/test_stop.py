"""The hooks that stop a session at a step agreed elsewhere, or on a stop request (agreed with the other
trainers of a cluster through the step's all-reduce, or not), and call back between steps."""
import signal

import tensorflow as tf

from hooks.stop import _AGREED, _REQUESTS, AGREED_SIGNALS, BetweenStepsHook, StopAtAgreedStepHook, \
    StopOnRequestHook


def test_the_session_stops_after_the_first_step_at_the_agreed_one_and_the_callback_sees_each_step_reached():
    agreed, seen = [None], []
    with tf.Graph().as_default():
        step = tf.compat.v1.train.get_or_create_global_step()
        train = tf.compat.v1.assign_add(step, 1)
        stop = StopAtAgreedStepHook(lambda: agreed[0])
        between = BetweenStepsHook(seen.append)
        runs = 0
        with tf.compat.v1.train.MonitoredSession(hooks=[between, stop]) as session:
            while not session.should_stop() and runs < 20:
                if runs == 3:
                    agreed[0] = 5  # agreed after step 3, as the chief writes its record between steps
                session.run(train)
                runs += 1
    assert runs == 5 and stop.stopped_at_step == 5
    assert seen == [0, 1, 2, 3, 4]  # before each run, the step the earlier runs reached


def run_with_agreement(own_signal_at, peer_signal_at, runs_at_most=20):
    """Runs a session whose graph holds a stand-in for add_stop_agreement's all-reduce (this trainer's
    requests plus a peer's, the peer's fed from `peer_signal_at` runs on) under a StopOnRequestHook
    whose own signal comes after `own_signal_at` runs; returns (the hook, runs, agreed signals, after_stop's steps)."""
    own, agreed, stopped = [None], [], []
    with tf.Graph().as_default():
        step = tf.compat.v1.train.get_or_create_global_step()
        requests = tf.compat.v1.placeholder_with_default(tf.zeros([len(AGREED_SIGNALS)]), [len(AGREED_SIGNALS)])
        peer = tf.compat.v1.placeholder_with_default(tf.zeros([len(AGREED_SIGNALS)]), [len(AGREED_SIGNALS)])
        tf.compat.v1.add_to_collection(_REQUESTS, requests)
        tf.compat.v1.add_to_collection(_AGREED, requests + peer)
        train = tf.group(tf.compat.v1.assign_add(step, 1), requests + peer)
        hook = StopOnRequestHook(lambda: own[0] is not None, signal_received=lambda: own[0],
                                 on_agreed=agreed.append, after_stop=stopped.append)
        runs = 0
        with tf.compat.v1.train.MonitoredSession(hooks=[hook]) as session:
            while not session.should_stop() and runs < runs_at_most:
                peer_request = [0, 1] if peer_signal_at is not None and runs >= peer_signal_at else [0, 0]
                session.run(train, feed_dict={peer: peer_request})
                runs += 1
                if runs == own_signal_at:
                    own[0] = signal.SIGTERM  # between two steps, as a signal's handler runs
    return hook, runs, agreed, stopped


def test_under_the_stop_agreement_a_signal_stops_after_the_next_step_which_carries_it_to_every_trainer():
    hook, runs, agreed, stopped = run_with_agreement(own_signal_at=3, peer_signal_at=None)
    assert runs == 4 and hook.stopped_at_step == 4 and stopped == [4]  # run 4 carried the request
    assert agreed == [] and hook.agreed_signal is None


def test_under_the_stop_agreement_another_trainers_signal_stops_this_one_after_the_same_step():
    hook, runs, agreed, stopped = run_with_agreement(own_signal_at=None, peer_signal_at=2)
    assert runs == 3 and hook.stopped_at_step == 3 and stopped == [3]
    assert agreed == [signal.SIGTERM] and hook.agreed_signal == signal.SIGTERM


def test_without_the_agreement_a_signal_stops_after_the_step_during_which_it_came():
    own = [False]
    with tf.Graph().as_default():
        step = tf.compat.v1.train.get_or_create_global_step()
        train = tf.compat.v1.assign_add(step, 1)
        stopped = []  # a parameter-server worker waits there for the chief's checkpoint: it ended first
        hook, runs = StopOnRequestHook(lambda: own[0], after_stop=stopped.append), 0
        with tf.compat.v1.train.MonitoredSession(hooks=[hook]) as session:
            while not session.should_stop() and runs < 20:
                if runs == 3:
                    own[0] = True
                session.run(train)
                runs += 1
    assert runs == 4 and hook.stopped_at_step == 4 and stopped == [4]
