"""The views of --tta (input_fns.views): each checked against the same view made here with NumPy
slicing, and the flag that names them (pipeline.flags.tta)."""
import argparse

import numpy as np
import pytest
import tensorflow as tf

from input_fns import CROP_FRACTION, CROP_VIEWS
from input_fns.views import VIEWS, apply_view, view_input_fn
from pipeline.flags.tta import tta_views


@pytest.fixture(scope="module")
def images():
    """A batch of 3 random uint8 images [3, 28, 30, 1] (height and width differ: a swapped axis shows)."""
    return np.random.default_rng(0).integers(0, 256, (3, 28, 30, 1), dtype=np.uint8)


def numpy_crop(images, where):
    """Returns the crop `where` ('top_left', ..., 'centre') of CROP_FRACTION of each side, by slicing,
    resized back bilinearly and rounded to uint8."""
    height, width = images.shape[1:3]
    h, w = int(round(height * CROP_FRACTION)), int(round(width * CROP_FRACTION))
    rows = {"top": slice(0, h), "bottom": slice(height - h, height), "centre": slice((height - h) // 2,
                                                                                       (height - h) // 2 + h)}
    cols = {"left": slice(0, w), "right": slice(width - w, width), "centre": slice((width - w) // 2,
                                                                                     (width - w) // 2 + w)}
    row, col = ("centre", "centre") if where == "centre" else where.split("_")
    crop = images[:, rows[row], cols[col], :].astype(np.float32)
    return np.clip(np.round(tf.image.resize(crop, [height, width]).numpy()), 0, 255).astype(np.uint8)


def test_flips_are_numpy_s_flips_and_identity_is_the_image(images):
    np.testing.assert_array_equal(apply_view(images, "identity").numpy(), images)
    np.testing.assert_array_equal(apply_view(images, "flip").numpy(), images[:, :, ::-1])
    np.testing.assert_array_equal(apply_view(images, "flip_vertical").numpy(), images[:, ::-1])
    np.testing.assert_array_equal(apply_view(images, "flip_both").numpy(), images[:, ::-1, ::-1])


@pytest.mark.parametrize("view", CROP_VIEWS)
def test_each_crop_is_its_corner_or_centre_resized_back(images, view):
    viewed = apply_view(images, view).numpy()
    assert viewed.shape == images.shape and viewed.dtype == np.uint8
    np.testing.assert_array_equal(viewed, numpy_crop(images, view[len("crop_"):]))
    assert not np.array_equal(viewed, images)


def test_float_images_stay_float_and_every_view_differs(images):
    scaled = images.astype(np.float32) / 255
    outputs = {view: apply_view(scaled, view).numpy() for view in VIEWS}
    assert all(o.dtype == np.float32 and o.shape == scaled.shape for o in outputs.values())
    assert len({o.tobytes() for o in outputs.values()}) == len(VIEWS)


def test_a_viewed_input_keeps_the_order_the_labels_and_the_other_features(images):
    def input_fn(input_context=None):
        features = {"image": images, "file": np.array([b"a", b"b", b"c"])}
        return tf.data.Dataset.from_tensor_slices((features, np.arange(3))).batch(2)
    batches = list(view_input_fn(input_fn, "flip")().as_numpy_iterator())
    np.testing.assert_array_equal(np.concatenate([f["image"] for f, _ in batches]), images[:, :, ::-1])
    assert [k for f, _ in batches for k in f["file"]] == [b"a", b"b", b"c"]
    assert np.concatenate([l for _, l in batches]).tolist() == [0, 1, 2]


def test_the_flag_names_the_views_identity_first_and_refuses_what_the_job_forbids():
    parse = tta_views("horizontal", {"flip=vertical": "upside down"})
    assert parse("none") == ()
    assert parse("flip") == ("identity", "flip")
    assert parse("crops,flip") == ("identity", *CROP_VIEWS, "flip")
    assert parse("flip=both") == ("identity", "flip_both")
    for bad, fragment in (("flip=vertical", "upside down"), ("spin", "expected none"), ("flip,flip", "twice"),
                          ("crops=0.5", "expected none"), ("flip=sideways", "expected none")):
        with pytest.raises(argparse.ArgumentTypeError, match=fragment):
            parse(bad)
