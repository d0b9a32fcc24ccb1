"""The hooks that stop a session at a step agreed elsewhere, and call back between steps."""
import tensorflow as tf

from hooks.stop import BetweenStepsHook, StopAtAgreedStepHook


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
