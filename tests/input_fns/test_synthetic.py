import numpy as np

from input_fns import synthetic


def test_synthetic_batches_have_the_real_shapes():
    input_fn = synthetic.make_input_fn((28, 28, 1), 10, 16, training=True)
    features, labels = next(iter(input_fn()))
    assert features["image"].shape == (16, 28, 28, 1) and labels.shape == (16, 10)
    assert 0.0 <= float(np.min(features["image"])) and float(np.max(features["image"])) <= 1.0
    np.testing.assert_array_equal(np.sum(labels, axis=1), np.ones(16))


def test_synthetic_eval_input_yields_exactly_the_requested_examples():
    input_fn = synthetic.make_input_fn((8, 8, 3), 4, 10, training=False, feature_key="x", num_examples=35)
    got = list(input_fn())
    assert [len(labels) for _, labels in got] == [10, 10, 10, 5] and set(got[0][0]) == {"x"}
