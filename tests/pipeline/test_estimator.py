"""pipeline.estimator.estimator_from_keras: the tasks of a cluster build their Estimators on one model dir,
and only one of them writes the weights they all start from."""
import os
import threading

import numpy as np
import pytest
import tensorflow as tf

from acquisition import locks
from models.optimizers import Adam
from pipeline.estimator import check_warm_start_reaches_every_weight, estimator_from_keras
from pipeline.model_dir import WARM_START_LOCK_FILE


def compiled_model(seed):
    tf.keras.utils.set_random_seed(seed)
    model = tf.keras.Sequential([tf.keras.Input((4,), name="image"), tf.keras.layers.Dense(2, activation="softmax")])
    model.compile(Adam(0.01), "categorical_crossentropy")
    return model


def files_under(directory):
    return {name: open(os.path.join(directory, name), "rb").read() for name in sorted(os.listdir(directory))}


def test_a_task_waits_while_another_writes_the_first_weights_then_starts_from_them(tmp_path):
    model_dir, keras_dir = str(tmp_path), str(tmp_path / "keras")
    ours, theirs = compiled_model(seed=1), compiled_model(seed=2)
    # Another task of the cluster holds the lock: it is writing the warm-start checkpoint.
    held = locks.acquire(os.path.join(model_dir, WARM_START_LOCK_FILE))
    built = {}
    builder = threading.Thread(target=lambda: built.update(
        estimator=estimator_from_keras(ours, tf.estimator.RunConfig(model_dir=model_dir))))
    builder.start()
    builder.join(timeout=3)
    assert builder.is_alive() and tf.train.latest_checkpoint(keras_dir) is None  # waiting, nothing written

    tf.keras.estimator.model_to_estimator(keras_model=theirs, config=tf.estimator.RunConfig(model_dir=model_dir))
    written = files_under(keras_dir)
    locks.release(held)
    builder.join(timeout=60)

    assert not builder.is_alive() and files_under(keras_dir) == written  # not written again
    warm_start = built["estimator"]._warm_start_settings.ckpt_to_initialize_from
    assert warm_start == tf.train.latest_checkpoint(keras_dir)
    kernel = next(name for name, _ in tf.train.list_variables(warm_start) if "kernel" in name)
    np.testing.assert_array_equal(tf.train.load_variable(warm_start, kernel), theirs.layers[0].kernel.numpy())
    assert not np.array_equal(theirs.layers[0].kernel.numpy(), ours.layers[0].kernel.numpy())


def strategy_named(name):
    devices = ["/cpu:0", "/cpu:1"]  # conftest's two logical CPU devices
    if name == "mirrored":
        return tf.distribute.MirroredStrategy(devices, cross_device_ops=tf.distribute.ReductionToOneDevice())
    if name == "central_storage":
        return tf.distribute.experimental.CentralStorageStrategy(devices, parameter_device="/cpu:0")
    return None


@pytest.mark.parametrize("strategy", [None, "mirrored", "central_storage"])
def test_a_new_model_dir_starts_from_every_weight_of_the_keras_model_batch_norm_statistics_too(tmp_path, strategy):
    # model_to_estimator's own warm start reaches TRAINABLE_VARIABLES only: the moving mean and variance of
    # pretrained (or --init-from) BatchNormalization layers began at 0 and 1. Under CentralStorageStrategy
    # it reached no weight at all (its AggregatingVariables never ran the warm start's restore).
    tf.keras.utils.set_random_seed(0)
    model = tf.keras.Sequential([tf.keras.Input((4,), name="image"), tf.keras.layers.BatchNormalization(name="bn"),
                                 tf.keras.layers.Dense(2, activation="softmax", name="head")])
    model.compile(Adam(0.01), "categorical_crossentropy")
    model.layers[0].moving_mean.assign([0.5, -1.0, 2.0, 3.0])
    model.layers[0].moving_variance.assign([4.0, 5.0, 6.0, 7.0])
    estimator = estimator_from_keras(model, tf.estimator.RunConfig(model_dir=str(tmp_path),
                                                                   train_distribute=strategy_named(strategy)))

    def input_fn():
        return tf.data.Dataset.from_tensors((tf.ones((2, 4)), tf.one_hot([0, 1], 2))).repeat()
    estimator.train(input_fn, steps=1)
    first = str(tmp_path / "model.ckpt-0")  # written before the step
    np.testing.assert_array_equal(tf.train.load_variable(first, "bn/moving_mean"), [0.5, -1.0, 2.0, 3.0])
    np.testing.assert_array_equal(tf.train.load_variable(first, "bn/moving_variance"), [4.0, 5.0, 6.0, 7.0])
    np.testing.assert_array_equal(tf.train.load_variable(first, "head/kernel"), model.layers[1].kernel.numpy())


def test_a_weight_the_training_graph_lacks_stops_the_run_rather_than_starting_it_at_random():
    with tf.Graph().as_default():
        tf.compat.v1.get_variable("head/kernel", shape=(2,))
        check_warm_start_reaches_every_weight(["head/kernel"])
        with pytest.raises(RuntimeError, match="no variables named head/bias"):
            check_warm_start_reaches_every_weight(["head/kernel", "head/bias"])
