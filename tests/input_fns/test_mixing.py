"""Mixup, cutmix and label smoothing against NumPy: the draws a function of (seed, step, replica) with
Beta(alpha, alpha)'s distribution, images and labels mixed as an independent NumPy mix of those draws,
labels summing to 1, cutmix's lambda the share of each image left to it, and float32 math under bf16."""
import numpy as np
import pytest
import tensorflow as tf

from input_fns import mixing
from models.optimizers import precision

STEPS = 1500  # draws per distribution test: the KS bound below is about 0.05 at this size


def drawn(batch, height, width, mixup, cutmix, switch, seed, step, replica=0):
    """Returns the draws of one step as NumPy values."""
    return {k: v.numpy() for k, v in mixing.draws(batch, height, width, mixup, cutmix, switch, seed, step,
                                                  replica).items()}


def draws_over_steps(key, mixup, cutmix, switch=0.5, seed=0, replica=0, steps=STEPS):
    """Returns draw `key` at steps 0 .. steps-1 as a NumPy array (one graph, mapped over the steps)."""
    fn = tf.function(lambda step: tf.cast(mixing.draws(8, 28, 28, mixup, cutmix, switch, seed, step, replica)[key],
                                          tf.float32))
    return tf.map_fn(fn, tf.range(steps, dtype=tf.int64), fn_output_signature=tf.float32).numpy()


def ks_statistic(a, b):
    """Returns the two-sample Kolmogorov-Smirnov statistic of samples `a` and `b`."""
    points = np.sort(np.concatenate([a, b]))
    cdf_a = np.searchsorted(np.sort(a), points, side="right") / len(a)
    cdf_b = np.searchsorted(np.sort(b), points, side="right") / len(b)
    return np.abs(cdf_a - cdf_b).max()


@pytest.mark.parametrize("alpha", [0.2, 1.0])
def test_mixup_lambda_follows_beta_alpha_alpha(alpha):
    lambdas = draws_over_steps("mixup_lambda", alpha, 0.0)
    reference = np.random.default_rng(0).beta(alpha, alpha, 20000)
    n, m = len(lambdas), len(reference)
    assert ks_statistic(lambdas, reference) < 1.95 * np.sqrt((n + m) / (n * m))  # alpha = 0.001
    assert lambdas.mean() == pytest.approx(0.5, abs=0.04)
    assert lambdas.var() == pytest.approx(1 / (4 * (2 * alpha + 1)), rel=0.12)
    other = np.random.default_rng(1).beta(alpha + 1.5, alpha + 1.5, 20000)  # the test tells another alpha apart
    assert ks_statistic(lambdas, other) > 1.95 * np.sqrt((n + m) / (n * m))


def test_the_draws_are_a_function_of_seed_step_and_replica():
    first = drawn(16, 28, 28, 0.4, 1.0, 0.5, seed=5, step=12, replica=1)
    again = drawn(16, 28, 28, 0.4, 1.0, 0.5, seed=5, step=12, replica=1)
    assert all(np.array_equal(first[k], again[k]) for k in first)
    for other in ({"seed": 6, "step": 12, "replica": 1}, {"seed": 5, "step": 13, "replica": 1},
                  {"seed": 5, "step": 12, "replica": 0}):
        changed = drawn(16, 28, 28, 0.4, 1.0, 0.5, **other)
        assert not np.array_equal(changed["permutation"], first["permutation"])
        assert changed["mixup_lambda"] != first["mixup_lambda"]
    assert sorted(first["permutation"]) == list(range(16))


@pytest.mark.parametrize("switch", [0.0, 0.3, 1.0])
def test_cutmix_is_chosen_with_the_switch_probability(switch):
    chosen = draws_over_steps("cutmix", 0.2, 1.0, switch)
    assert chosen.mean() == pytest.approx(switch, abs=4 * np.sqrt(0.25 / STEPS))
    assert draws_over_steps("cutmix", 0.0, 1.0, switch, steps=50).all()  # cutmix alone: always
    assert not draws_over_steps("cutmix", 0.2, 0.0, switch, steps=50).any()  # mixup alone: never


def numpy_mix(images, labels, d):
    """The mix of `d`'s draws, in NumPy: mixup's blend or cutmix's box, labels by d['lambda']."""
    x = images.astype(np.float64)
    partners = x[d["permutation"]]
    if d["cutmix"]:
        top, bottom, left, right = d["box"]
        x = x.copy()
        x[:, top:bottom, left:right] = partners[:, top:bottom, left:right]
    else:
        x = d["mixup_lambda"] * x + (1 - d["mixup_lambda"]) * partners
    y = d["lambda"] * labels + (1 - d["lambda"]) * labels[d["permutation"]]
    return x, y


def batch(dtype, size=12, height=20, width=24, classes=5, seed=0):
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, (size, height, width, 3)).astype(dtype)
    labels = np.eye(classes, dtype=np.float32)[rng.integers(0, classes, size)]
    return images, labels


@pytest.mark.parametrize("mixup, cutmix, step", [(0.2, 0.0, 3), (0.0, 1.0, 3), (0.4, 1.0, 0), (0.4, 1.0, 1),
                                                 (0.4, 1.0, 2), (0.4, 1.0, 3)])
def test_mixed_batches_equal_numpys_mix_of_the_same_draws(mixup, cutmix, step):
    images, labels = batch(np.float32)
    x, y = mixing.mix(tf.constant(images), tf.constant(labels), mixup, cutmix, 0.5, 9, step, 1)
    d = drawn(12, 20, 24, mixup, cutmix, 0.5, 9, step, 1)
    expected_x, expected_y = numpy_mix(images, labels, d)
    np.testing.assert_allclose(x.numpy(), expected_x, rtol=1e-5, atol=1e-3)
    np.testing.assert_allclose(y.numpy(), expected_y, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(y.numpy().sum(axis=1), 1.0, atol=1e-6)
    assert y.dtype == tf.float32 and x.dtype == tf.float32


def test_uint8_batches_are_mixed_in_float_and_rounded_back():
    images, labels = batch(np.uint8)
    x, _ = mixing.mix(tf.constant(images), tf.constant(labels), 0.2, 0.0, 0.5, 1, 4)
    expected, _ = numpy_mix(images, labels, drawn(12, 20, 24, 0.2, 0.0, 0.5, 1, 4))
    assert x.dtype == tf.uint8
    assert np.abs(x.numpy().astype(np.float64) - expected).max() <= 0.5 + 1e-3


@pytest.mark.parametrize("step", range(8))
def test_cutmix_lambda_is_the_share_of_each_image_left_to_it(step):
    height, width = 20, 24
    images = np.repeat(np.arange(1, 13, dtype=np.float32), height * width).reshape(12, height, width, 1)
    labels = np.eye(12, dtype=np.float32)
    x, y = mixing.mix(tf.constant(images), tf.constant(labels), 0.0, 1.0, 0.5, 2, step)
    d = drawn(12, height, width, 0.0, 1.0, 0.5, 2, step)
    x, y = x.numpy(), y.numpy()
    for i, j in enumerate(d["permutation"]):
        if i == j:
            continue  # an image paired with itself stays whole: its label too
        own = (x[i] == images[i]).mean()  # the share of image i's pixels still its own
        assert y[i, i] == pytest.approx(own, abs=1e-6) == pytest.approx(d["lambda"], abs=1e-6)
        assert y[i, j] == pytest.approx(1 - own, abs=1e-6)
    # The box's sides: sqrt(1 - lambda drawn) of the image's, cut to whole pixels, halved about the
    # centre and clipped at the edges (timm's rand_bbox).
    top, bottom, left, right = d["box"]
    drawn_lambda = d["cutmix_beta"]
    cut_h, cut_w = int(height * np.sqrt(1 - drawn_lambda)), int(width * np.sqrt(1 - drawn_lambda))
    assert bottom - top <= 2 * (cut_h // 2) and right - left <= 2 * (cut_w // 2)
    assert bottom - top == 2 * (cut_h // 2) or top == 0 or bottom == height
    assert right - left == 2 * (cut_w // 2) or left == 0 or right == width


def test_label_smoothing_moves_eps_evenly_over_the_classes():
    labels = np.eye(4, dtype=np.float32)[[0, 3, 1]]
    smoothed = mixing.smooth_labels(tf.constant(labels), 0.1).numpy()
    np.testing.assert_allclose(smoothed, labels * 0.9 + 0.025, rtol=1e-6)
    np.testing.assert_allclose(smoothed.sum(axis=1), 1.0, rtol=1e-6)
    mixed = mixing.smooth_labels(tf.constant([[0.3, 0.7, 0.0, 0.0]]), 0.2).numpy()
    np.testing.assert_allclose(mixed, [[0.29, 0.61, 0.05, 0.05]], rtol=1e-6)
    assert mixing.smooth_labels(tf.constant(labels), 0.0) is not None


@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16])
def test_the_math_is_float32_under_bf16(dtype):
    images, labels = batch(np.float32)
    with precision("bf16"), tf.Graph().as_default() as graph:
        assert tf.keras.mixed_precision.global_policy().compute_dtype == "bfloat16"
        x, y = mixing.mix(tf.cast(tf.constant(images), dtype), tf.constant(labels), 0.4, 1.0, 0.5, 3, 1)
        y = mixing.smooth_labels(y, 0.1)
        inner = [op for op in graph.get_operations() if op.name.startswith(("mixing/", "label_smoothing/"))
                 and op.type in ("Mul", "AddV2", "Sub", "SelectV2", "GatherV2")]
        assert inner and all(out.dtype in (tf.float32, tf.float64, tf.int32, tf.int64) for op in inner
                             for out in op.outputs), [(op.name, op.outputs[0].dtype) for op in inner]
        assert x.dtype == dtype and y.dtype == tf.float32
        with tf.compat.v1.Session() as session:
            mixed_labels = session.run(y)
    d = drawn(12, 20, 24, 0.4, 1.0, 0.5, 3, 1)
    _, expected = numpy_mix(images, labels, d)
    np.testing.assert_allclose(mixed_labels, expected * 0.9 + 0.02, rtol=1e-6, atol=1e-7)  # not bf16's 3 digits


def test_no_method_leaves_the_batch_as_it_is():
    images, labels = batch(np.float32)
    x, y = mixing.mix(tf.constant(images), tf.constant(labels), 0.0, 0.0, 0.5, 0, 0)
    assert np.array_equal(x, images) and np.array_equal(y, labels)
