import collections

import numpy as np
import pytest
import tensorflow as tf

from acquisition.errors import InputDataError
from acquisition.fashion_mnist import load_split, prepare_shards
from input_fns import fashion_mnist


def batches(input_fn, limit=None, input_context=None):
    dataset = input_fn(input_context) if input_context else input_fn()
    return list(dataset.take(limit).as_numpy_iterator() if limit else dataset.as_numpy_iterator())


def test_eval_input_reads_every_test_image_once_scaled_and_one_hot(fashion_data_dir, tmp_path):
    splits = prepare_shards(fashion_data_dir, str(tmp_path))
    input_fn = fashion_mnist.make_input_fn(splits["test"]["pattern"], 64, training=False)
    got = batches(input_fn)
    assert [len(labels) for _, labels in got] == [64, 64, 64, 8]  # the last partial batch is kept
    features, labels = got[0]
    assert features["image"].shape == (64, 28, 28, 1) and features["image"].dtype == np.float32
    assert labels.shape == (64, 10) and labels.dtype == np.float32
    assert 0.0 <= min(f["image"].min() for f, _ in got) and max(f["image"].max() for f, _ in got) <= 1.0
    all_labels = np.concatenate([l for _, l in got])
    assert set(np.unique(all_labels)) == {0.0, 1.0} and (all_labels.sum(axis=1) == 1).all()
    _, true_labels = load_split(fashion_data_dir, "test")
    assert collections.Counter(all_labels.argmax(1).tolist()) == collections.Counter(true_labels.tolist())


def test_training_input_repeats_shuffles_and_keeps_batches_whole(fashion_data_dir, tmp_path):
    splits = prepare_shards(fashion_data_dir, str(tmp_path))
    input_fn = fashion_mnist.make_input_fn(splits["train"]["pattern"], 96, training=True, seed=1)
    got = batches(input_fn, limit=20)  # 1,920 images: more than two passes over 800
    assert all(len(labels) == 96 for _, labels in got)
    eval_order = np.concatenate([l for _, l in batches(
        fashion_mnist.make_input_fn(splits["train"]["pattern"], 96, training=False))])
    assert not np.array_equal(np.concatenate([l for _, l in got])[:96], eval_order[:96])


def test_each_input_pipeline_reads_its_own_files(fashion_data_dir, tmp_path):
    splits = prepare_shards(fashion_data_dir, str(tmp_path))
    input_fn = fashion_mnist.make_input_fn(splits["test"]["pattern"], 10, training=False)
    parts = [np.concatenate([f["image"] for f, _ in batches(input_fn, input_context=tf.distribute.InputContext(
        num_input_pipelines=2, input_pipeline_id=i, num_replicas_in_sync=2))]) for i in range(2)]
    everything = np.concatenate([f["image"] for f, _ in batches(input_fn)])
    assert len(parts[0]) + len(parts[1]) == len(everything) == 200
    as_set = lambda a: {x.tobytes() for x in a}  # noqa: E731
    assert not as_set(parts[0]) & as_set(parts[1])
    assert as_set(parts[0]) | as_set(parts[1]) == as_set(everything)


def test_a_pattern_matching_nothing_fails_before_training(tmp_path):
    with pytest.raises(InputDataError, match="no files match the pattern"):
        fashion_mnist.make_input_fn(str(tmp_path / "train-*.tfrecord"), 8, training=True)
