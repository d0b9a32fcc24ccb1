"""The progress hook's lines, driven by a fake clock."""
import datetime
import logging

import pytest
import tensorflow as tf

from hooks.progress import ProgressHook, ending, format_duration


@pytest.mark.parametrize("seconds, text", [(0, "0s"), (44.6, "45s"), (725, "12m05s"), (11220, "3h07m")])
def test_durations_read_as_a_person_writes_them(seconds, text):
    assert format_duration(seconds) == text


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_eta_is_the_steps_left_at_the_last_window_rate(caplog):
    clock = FakeClock()
    with tf.Graph().as_default():
        step = tf.compat.v1.train.get_or_create_global_step()
        loss = tf.constant(0.25)
        tf.compat.v1.add_to_collection(tf.compat.v1.GraphKeys.LOSSES, loss)
        hook = ProgressHook(max_steps=40, global_batch_size=32, every_n_steps=10, clock=clock,
                            now=lambda: datetime.datetime(2026, 1, 1, 12, 0))
        train_op = tf.compat.v1.assign_add(step, 1)
        with caplog.at_level(logging.INFO, logger="hooks.progress"), \
                tf.compat.v1.train.MonitoredSession(hooks=[hook]) as session:
            for i in range(40):
                clock.now += 30.0 if i == 0 else (0.5 if i < 20 else 1.0)  # a slow first step, then slower
                session.run(train_op)
    assert hook.lines == [
        "step 10/40 (25.0%): loss 0.2500, 64.0 images/sec, ETA 15s",  # 9 steps in 4.5 s: the first left out
        "step 20/40 (50.0%): loss 0.2500, 64.0 images/sec, ETA 10s",
        "step 30/40 (75.0%): loss 0.2500, 32.0 images/sec, ETA 10s",
        "step 40/40 (100.0%): loss 0.2500, 32.0 images/sec, ETA 0s",
    ]
    assert "expected: about 15s for the 30 steps left, ending about 12:00" in caplog.text


def test_the_expected_end_is_a_time_within_a_day_a_date_beyond_and_left_out_past_the_calendar():
    now = datetime.datetime(2026, 1, 1, 12, 0)
    assert ending(now, 3600) == ", ending about 13:00"
    assert ending(now, 3 * 86400) == ", ending about 2026-01-04 12:00"
    assert ending(now, 1e14) == ""  # 3 million years: a --max-steps of 10**12 at 0.1 s a step
