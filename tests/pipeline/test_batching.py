import pytest

from pipeline.batching import scaled_learning_rate, steps_for_epochs


def test_linear_scaling_follows_the_global_batch():
    assert scaled_learning_rate(0.001, 1024, 512) == pytest.approx(0.002)
    assert scaled_learning_rate(0.001, 128, 512) == pytest.approx(0.00025)
    assert scaled_learning_rate(0.001, 1024, 512, rule="none") == 0.001
    with pytest.raises(ValueError, match="unknown learning-rate scaling rule"):
        scaled_learning_rate(0.001, 1024, 512, rule="sqrt")


def test_epochs_become_a_whole_number_of_global_steps():
    assert steps_for_epochs(5, 60000, 512) == 586
    assert steps_for_epochs(1, 800, 64) == 13
    assert steps_for_epochs(0.001, 10, 64) == 1
