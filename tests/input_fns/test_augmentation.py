"""Stateless augmentation: each transform does what it says, in the batch's own dtype, and the
draws are a pure function of (seed, step, replica)."""
import numpy as np
import pytest
import tensorflow as tf

from input_fns.augmentation import augment

ALL = [("flip", "horizontal"), ("rotate", 10.0), ("zoom", 0.1), ("translate", 0.1), ("contrast", 0.2)]


def batch(n=8, size=16, channels=1, dtype=tf.uint8):
    rng = np.random.default_rng(0)
    return tf.constant(rng.integers(0, 256, (n, size, size, channels)), dtype)


def test_the_draws_are_a_function_of_seed_step_and_replica():
    images = batch()
    first = augment(images, ALL, seed=7, step=12, replica=1).numpy()
    assert np.array_equal(first, augment(images, ALL, seed=7, step=12, replica=1).numpy())
    for other in ({"seed": 8, "step": 12, "replica": 1}, {"seed": 7, "step": 13, "replica": 1},
                  {"seed": 7, "step": 12, "replica": 0}):
        assert not np.array_equal(first, augment(images, ALL, **other).numpy()), other


def test_a_horizontal_flip_mirrors_about_half_the_images_and_nothing_else():
    images = batch(n=64)
    flipped = augment(images, [("flip", "horizontal")], seed=0, step=0).numpy()
    mirrored = [np.array_equal(f, i[:, ::-1]) for f, i in zip(flipped, images.numpy())]
    kept = [np.array_equal(f, i) for f, i in zip(flipped, images.numpy())]
    assert all(m or k for m, k in zip(mirrored, kept)) and 16 < sum(mirrored) < 48


def test_geometric_transforms_move_pixels_within_their_bounds():
    # A bright square at the centre: rotation, zoom and shift keep its centre of mass near the middle.
    images = np.zeros((32, 33, 33, 1), np.float32)
    images[:, 12:21, 12:21] = 1.0
    moved = augment(tf.constant(images), [("rotate", 30.0), ("zoom", 0.2), ("translate", 0.1)], seed=1,
                    step=0).numpy()
    assert not np.allclose(moved, images)
    ys, xs = np.mgrid[:33, :33]
    for image in moved[..., 0]:
        cy, cx = (image * ys).sum() / image.sum(), (image * xs).sum() / image.sum()
        assert abs(cy - 16) <= 0.1 * 33 + 1 and abs(cx - 16) <= 0.1 * 33 + 1


def test_contrast_keeps_each_images_mean_and_integer_batches_stay_in_range():
    images = batch(n=16, dtype=tf.float32)
    changed = augment(images, [("contrast", 0.5)], seed=3, step=5).numpy()
    assert np.allclose(changed.mean(axis=(1, 2, 3)), images.numpy().mean(axis=(1, 2, 3)), rtol=1e-4)
    assert not np.allclose(changed.std(axis=(1, 2, 3)), images.numpy().std(axis=(1, 2, 3)))
    out = augment(batch(), ALL, seed=0, step=0)
    assert out.dtype == tf.uint8 and out.shape == (8, 16, 16, 1)


@pytest.mark.parametrize("dtype", [tf.bfloat16, tf.float16])
def test_low_precision_batches_are_transformed_in_float32_and_kept_in_their_dtype(dtype):
    out = augment(batch(dtype=dtype), ALL, seed=0, step=0)
    assert out.dtype == dtype and np.isfinite(tf.cast(out, tf.float32).numpy()).all()


def test_an_unknown_transform_is_refused():
    with pytest.raises(ValueError, match="unknown augmentation 'blur'"):
        augment(batch(), [("blur", 1.0)], seed=0, step=0)


def test_the_static_shape_survives_for_the_layers_after():
    @tf.function(input_signature=[tf.TensorSpec([None, 28, 28, 1], tf.uint8)])
    def traced(images):
        out = augment(images, ALL, seed=0, step=0)
        assert out.shape.as_list() == [None, 28, 28, 1]
        return out
    assert traced(batch(size=28)).shape == (8, 28, 28, 1)
