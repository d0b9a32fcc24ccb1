"""pipeline.estimator.estimator_from_keras: the tasks of a cluster build their Estimators on one model dir,
and only one of them writes the weights they all start from; first weights that a start stopped before its
first checkpoint left are this run's only when made the same way; every weight starts from the Keras model's."""
import json
import os
import threading
import types
import uuid

import numpy as np
import pytest
import tensorflow as tf

from acquisition import locks
from models.optimizers import Adam
from acquisition import storage
from pipeline.estimator import check_warm_start_reaches_every_weight, estimator_from_keras, weights_origin, \
    weights_sources
from pipeline.model_dir import FIRST_WEIGHTS_RECORD, WARM_START_LOCK_FILE


def compiled_model(seed):
    tf.keras.utils.set_random_seed(seed)  # (each model's weights named alike, as in each task's own process)
    model = tf.keras.Sequential([tf.keras.Input((4,), name="image"),
                                 tf.keras.layers.Dense(2, activation="softmax", name="head")])
    model.compile(Adam(0.01), "categorical_crossentropy")
    return model


def files_under(directory):
    return {name: open(os.path.join(directory, name), "rb").read() for name in sorted(os.listdir(directory))}


def write_first_weights(model, model_dir, weights_from=None):
    """Writes keras/ as another task's estimator_from_keras does (under the lock the caller holds, if any),
    recorded as made with `weights_from`; returns its files."""
    tf.keras.estimator.model_to_estimator(keras_model=model, config=tf.estimator.RunConfig(model_dir=model_dir))
    keras_dir = storage.join(model_dir, "keras")
    storage.write_atomically(storage.join(keras_dir, FIRST_WEIGHTS_RECORD),
                             json.dumps(weights_origin(model, weights_from)))
    return None if storage.is_url(model_dir) else files_under(keras_dir)


def warm_start_kernel(estimator):
    """Returns the head's kernel in the checkpoint `estimator` warm-starts from."""
    warm_start = estimator._warm_start_settings.ckpt_to_initialize_from
    return tf.train.load_variable(warm_start, next(n for n, _ in tf.train.list_variables(warm_start) if "kernel" in n))


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

    written = write_first_weights(theirs, model_dir)
    locks.release(held)
    builder.join(timeout=60)

    assert not builder.is_alive() and files_under(keras_dir) == written  # not written again
    warm_start = built["estimator"]._warm_start_settings.ckpt_to_initialize_from
    assert warm_start == tf.train.latest_checkpoint(keras_dir)
    np.testing.assert_array_equal(warm_start_kernel(built["estimator"]), theirs.layers[0].kernel.numpy())
    assert not np.array_equal(theirs.layers[0].kernel.numpy(), ours.layers[0].kernel.numpy())


THIS_RUN = {"init_from": None, "weights": None, "seed": None}
LEFT_BY = {  # what made the first weights a stopped start left (keras/first_weights.json), whether their data file
    # was then cut short, and whether they are this run's
    "this launch (another task)": (THIS_RUN, False, True),
    "this launch, cut short": (THIS_RUN, True, False),
    "another --init-from": ({**THIS_RUN, "init_from": "/runs/head/best/model.ckpt-6"}, False, False),
    "another --seed": ({**THIS_RUN, "seed": 7}, False, False),
    "no record (cut before it)": (None, False, False),
    "a damaged record": ("{", False, False),
}


@pytest.mark.parametrize("where", ["local", "ram"])
@pytest.mark.parametrize("left_by", LEFT_BY)
def test_first_weights_a_stopped_start_left_are_kept_only_when_made_the_way_this_run_makes_them(tmp_path, left_by,
                                                                                               where):
    # model_to_estimator writes keras/ only where there is none: kept, a start stopped before its first checkpoint
    # with other flags would decide this run's weights (a cluster relaunched with --init-from added, say).
    model_dir = str(tmp_path) if where == "local" else f"ram://{uuid.uuid4().hex}/run"
    keras_dir = storage.join(model_dir, "keras")
    record, cut_short, kept = LEFT_BY[left_by]
    theirs = compiled_model(seed=2)
    write_first_weights(theirs, model_dir, record if isinstance(record, dict) else None)
    if not isinstance(record, dict):
        storage.remove(storage.join(keras_dir, FIRST_WEIGHTS_RECORD))
        if record is not None:
            storage.write_atomically(storage.join(keras_dir, FIRST_WEIGHTS_RECORD), record)
    if cut_short:
        data = next(name for name in storage.listdir(keras_dir) if ".data-" in name)
        storage.write_atomically(storage.join(keras_dir, data), storage.read_bytes(storage.join(keras_dir, data))[:9])

    ours = compiled_model(seed=1)  # (built after theirs' model_to_estimator, as in a process of its own)
    estimator = estimator_from_keras(ours, tf.estimator.RunConfig(model_dir=model_dir), weights_from=lambda: THIS_RUN)
    starts_from = theirs if kept else ours
    np.testing.assert_array_equal(warm_start_kernel(estimator), starts_from.layers[0].kernel.numpy())
    recorded = json.loads(storage.read_text(storage.join(keras_dir, FIRST_WEIGHTS_RECORD)))
    assert recorded == weights_origin(ours, THIS_RUN)


def test_first_weights_whose_removal_was_cut_short_are_not_taken_for_whole_ones(tmp_path, monkeypatch):
    # A run of other flags was killed while removing keras/: a run of the flags that made it must not find its
    # record beside half its files (the warm start would fail on the missing ones).
    model_dir, keras_dir = str(tmp_path), str(tmp_path / "keras")
    write_first_weights(compiled_model(seed=2), model_dir, {"seed": 2})

    def killed_midway(path):
        os.remove(next(os.path.join(path, name) for name in os.listdir(path) if ".data-" in name))
        raise KeyboardInterrupt  # (as a kill would, before the rest went)
    monkeypatch.setattr(storage, "remove_tree", killed_midway)
    with pytest.raises(KeyboardInterrupt):
        estimator_from_keras(compiled_model(seed=3), tf.estimator.RunConfig(model_dir=model_dir),
                             weights_from=lambda: {"seed": 3})
    monkeypatch.undo()

    ours = compiled_model(seed=2)
    estimator = estimator_from_keras(ours, tf.estimator.RunConfig(model_dir=model_dir), weights_from=lambda: {"seed": 2})
    np.testing.assert_array_equal(warm_start_kernel(estimator), ours.layers[0].kernel.numpy())


def test_a_model_dir_with_a_checkpoint_keeps_its_first_weights_whatever_made_them(tmp_path):
    model_dir, keras_dir = str(tmp_path), str(tmp_path / "keras")
    written = write_first_weights(compiled_model(seed=2), model_dir, {"seed": 7})
    open(os.path.join(model_dir, "model.ckpt-5.index"), "wb").close()  # a run reached step 5: it resumes
    tf.compat.v1.train.update_checkpoint_state(model_dir, "model.ckpt-5")

    def sources():  # a resume reads no weights file nor --init-from's index: what made keras/ is not asked
        raise AssertionError("the sources of the first weights were read for a model dir that resumes")
    estimator_from_keras(compiled_model(seed=1), tf.estimator.RunConfig(model_dir=model_dir), weights_from=sources)
    assert files_under(keras_dir) == written


def test_the_sources_name_the_contents_of_the_weights_not_only_their_paths(tmp_path):
    # A source run redone in place to the same step, or a weights file replaced: the same paths, other weights.
    prefix, weights = str(tmp_path / "best" / "model.ckpt-6"), tmp_path / "backbone.h5"
    os.makedirs(os.path.dirname(prefix))
    settings = types.SimpleNamespace(weights=str(weights), seed=None)
    initial = types.SimpleNamespace(checkpoint=prefix)

    def sources(index, h5):
        open(prefix + ".index", "wb").write(index)
        weights.write_bytes(h5)
        return weights_sources(settings, initial)
    first = sources(b"index one", b"weights one")
    assert first == sources(b"index one", b"weights one")
    assert first != sources(b"index two", b"weights one") and first != sources(b"index one", b"weights two")
    assert first["init_from"] == prefix and first["weights"] == str(weights)
    assert weights_sources(types.SimpleNamespace(weights="imagenet", seed=3), None) == {
        "init_from": None, "init_from_digest": None, "weights": "imagenet", "weights_digest": None, "seed": 3}


def test_the_origin_names_the_model_by_its_weights_names_and_shapes():
    a, b = compiled_model(seed=1), compiled_model(seed=2)
    assert weights_origin(a, {"seed": 1}) == weights_origin(b, {"seed": 1}) != weights_origin(b, {"seed": 2})
    wider = tf.keras.Sequential([tf.keras.Input((5,), name="image"), tf.keras.layers.Dense(2, name="head")])
    assert weights_origin(wider)["model"] != weights_origin(a)["model"]


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
