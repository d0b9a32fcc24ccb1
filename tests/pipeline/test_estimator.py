"""pipeline.estimator.estimator_from_keras: the tasks of a cluster build their Estimators on one model dir,
and only one of them writes the weights they all start from."""
import os
import threading

import numpy as np
import tensorflow as tf

from acquisition import locks
from models.optimizers import Adam
from pipeline.estimator import estimator_from_keras
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
