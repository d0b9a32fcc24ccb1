"""A training input started `skip` examples in yields the batches the whole stream yields from there
(under op determinism, as --deterministic runs it), with and without a cache."""
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.framework import config as tf_config

from input_fns import image_list


@pytest.fixture
def op_determinism():
    tf_config.enable_op_determinism()
    yield
    tf_config.disable_op_determinism()


def write_images(folder, count):
    files = []
    for i in range(count):
        path = str(folder / f"{i}.png")
        tf.io.write_file(path, tf.io.encode_png(tf.fill([4, 4, 1], tf.constant(i * 10, tf.uint8))))
        files.append(path)
    return files


def batches(files, skip, cache, count):
    config = image_list.ImageListConfig(files, [i % 3 for i in range(len(files))], 3, (4, 4), 1, 2, True,
                                        seed=5, cache=cache, shuffle_buffer=4, skip=skip)
    dataset = image_list.make_input_fn(config)()
    return [(features["image"].numpy(), labels.numpy()) for features, labels in dataset.take(count)]


@pytest.mark.parametrize("cache", [None, ""])
def test_a_skipped_stream_goes_on_where_the_whole_one_stood(tmp_path, op_determinism, cache):
    files = write_images(tmp_path, 5)  # 5 images, batches of 2: the skip crosses epochs mid-batch
    whole = batches(files, 0, cache, 8)
    skipped = batches(files, 7, cache, 4)  # 7 examples: batches 3.5 to 7.5 of the whole stream
    flat = np.concatenate([images for images, _ in whole])
    assert np.array_equal(np.concatenate([images for images, _ in skipped]), flat[7:15])
    assert not np.array_equal(flat[:8], flat[7:15])  # the skip is seen
