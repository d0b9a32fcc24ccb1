import math

import pytest

from hooks.loss_watch import DivergenceError, LossWatchHook


class Run:
    def __init__(self, loss):
        self.results = loss


def feed(hook, losses, first_step=0):
    hook.global_step = first_step  # as after_create_session reads it
    for loss in losses:
        hook.after_run(None, Run(loss))


def test_a_nan_or_infinite_loss_stops_training_naming_the_step():
    for bad in (math.nan, math.inf):
        hook = LossWatchHook(window_steps=10)
        with pytest.raises(DivergenceError, match=r"became (nan|inf) at global step 103"):
            feed(hook, [2.3, 2.2, bad], first_step=100)


def test_a_window_mean_over_twice_the_first_is_warned_about_once_per_window():
    hook = LossWatchHook(window_steps=3, rise_factor=2.0)
    feed(hook, [2.0, 2.3, 2.0] + [1.5] * 3 + [4.0, 5.0, 5.0] + [3.0] * 3)
    assert hook.first_window_mean == pytest.approx(6.3 / 3)
    assert len(hook.warnings) == 1 and "global step 9 is 4.667, over 2x its first window's 2.1" in hook.warnings[0]
