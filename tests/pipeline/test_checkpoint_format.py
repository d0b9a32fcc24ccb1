"""Models with BatchNormalization train under model_to_estimator on 2 mirrored replicas, and their
moving statistics reach the checkpoint (name-based: see pipeline.estimator.checkpoint_format), under
MirroredStrategy and CentralStorageStrategy (pipeline.estimator.saver_without_duplicates)."""
import numpy as np
import pytest
import tensorflow as tf

from models.optimizers import Adam
from pipeline.distribution import build_distribution
from pipeline.errors import UsageError
from pipeline.model_dir import check_fits
from pipeline.estimator import estimator_from_keras, build_run_config, checkpoint_format


def model_with_batch_norm():
    inputs = tf.keras.Input((8, 8, 1), name="image")
    x = tf.keras.layers.Conv2D(4, 3)(inputs)
    x = tf.keras.layers.BatchNormalization(name="bn")(x)
    x = tf.keras.layers.GlobalAveragePooling2D()(x)
    model = tf.keras.Model(inputs, tf.keras.layers.Dense(2, activation="softmax")(x))
    model.compile(Adam(0.01), "categorical_crossentropy")
    return model


@pytest.mark.parametrize("strategy", ["mirrored", "central_storage"])  # central storage lists each slot twice
def test_batch_norm_models_train_on_two_replicas_and_save_their_moving_statistics(tmp_path, strategy):
    model = model_with_batch_norm()
    assert checkpoint_format(model) == "saver"
    plain = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(2)])
    assert checkpoint_format(plain) == "checkpoint"  # the other jobs' checkpoints stay as they were

    def input_fn(input_context=None):
        images = np.random.default_rng(0).normal(5.0, 1.0, (16, 8, 8, 1)).astype(np.float32)
        return tf.data.Dataset.from_tensor_slices(({"image": images}, np.eye(2, dtype=np.float32)[[0, 1] * 8])) \
            .batch(4).repeat()

    config = build_run_config(str(tmp_path), build_distribution(cpu_replicas=2, strategy=strategy), checkpoint_steps=100,
                              summary_steps=100)
    estimator = estimator_from_keras(model, config)
    estimator.train(input_fn, max_steps=3)
    names = dict(tf.train.list_variables(estimator.latest_checkpoint()))
    moving_mean = next(n for n in names if n.startswith("bn/moving_mean"))
    assert tf.train.load_variable(estimator.latest_checkpoint(), moving_mean).mean() != 0  # updated from 0
    assert estimator.evaluate(input_fn, steps=1)["global_step"] == 3
    check_fits(str(tmp_path), model)  # a resume reads the name-based checkpoint by variable name
    wider = tf.keras.Model(model.input, tf.keras.layers.Dense(3, name="other")(model.layers[-2].output))
    with pytest.raises(UsageError, match="does not fit the model these flags build"):
        check_fits(str(tmp_path), wider)


def test_a_batch_norm_model_resumes_on_any_number_of_replicas(tmp_path):
    # MirroredStrategy lists the Adam slots of BatchNormalization's gamma and beta mirrored and also once per
    # replica (`.../m/replica_1`); the Estimator's default Saver wrote a key per replica, so a checkpoint of
    # 1 replica could not be resumed on 2 (NotFoundError). Each is now saved once, and restored to every replica.
    batch = (np.random.default_rng(0).normal(5.0, 1.0, (4, 8, 8, 1)).astype(np.float32),
             np.eye(2, dtype=np.float32)[[0, 1, 0, 1]])

    def input_fn(input_context=None):  # the same batch every step, so that a resumed run sees what a straight one does
        return tf.data.Dataset.from_tensors(({"image": batch[0]}, batch[1])).repeat()

    def train(model_dir, replicas, steps):
        tf.keras.backend.clear_session()  # the same layer names each time
        tf.keras.utils.set_random_seed(0)
        config = build_run_config(str(model_dir), build_distribution(cpu_replicas=replicas), checkpoint_steps=100,
                                  summary_steps=100)
        estimator = estimator_from_keras(model_with_batch_norm(), config)
        estimator.train(input_fn, max_steps=steps)
        return estimator.latest_checkpoint()

    train(tmp_path / "one", 1, 2)
    resumed = train(tmp_path / "one", 2, 4)  # failed: "Key training/Adam/bn/beta/m/replica_1 not found"
    assert resumed.endswith("-4") and not [n for n, _ in tf.train.list_variables(resumed) if "replica_" in n]
    straight = train(tmp_path / "straight", 2, 6)
    train(tmp_path / "two", 2, 3)
    again = train(tmp_path / "two", 2, 6)  # every replica's slots restored: it trains on as the straight run
    for name, _ in tf.train.list_variables(straight):
        np.testing.assert_allclose(tf.train.load_variable(again, name), tf.train.load_variable(straight, name),
                                   rtol=1e-5, atol=1e-6, err_msg=name)
