import pytest

from pipeline.batching import scaled_learning_rate


def test_linear_scaling_follows_the_global_batch():
    assert scaled_learning_rate(0.001, 1024, 512) == pytest.approx(0.002)
    assert scaled_learning_rate(0.001, 128, 512) == pytest.approx(0.00025)
    assert scaled_learning_rate(0.001, 1024, 512, rule="none") == 0.001
    with pytest.raises(ValueError, match="unknown learning-rate scaling rule"):
        scaled_learning_rate(0.001, 1024, 512, rule="sqrt")

