"""--ema (pipeline.ema): the shadows in every checkpoint are the exponential moving average of the raw
weights of each step, in both checkpoint formats and on 1 and 2 mirrored replicas; a resumed run
continues them exactly; evaluation reads them."""
import numpy as np
import pytest
import tensorflow as tf

from models.optimizers import Adam
from pipeline import ema as ema_lib
from pipeline.distribution import build_distribution
from pipeline.estimator import build_run_config, checkpoint_format, estimator_from_keras

DECAY = 0.7  # far from 1, so that every step moves the shadow visibly
IMAGES = np.random.default_rng(0).normal(0.0, 1.0, (32, 6, 6, 1)).astype(np.float32)
LABELS = np.eye(3, dtype=np.float32)[np.arange(32) % 3]


def compiled_model(batch_norm, seed=1):
    """Returns a small compiled classifier of 6x6 images into 3 classes, with a BatchNormalization layer
    (name-based checkpoints) or without (object-based), its layers named so that eager and graph
    weight names agree."""
    tf.keras.utils.set_random_seed(seed)
    inputs = tf.keras.Input((6, 6, 1), name="image")
    x = tf.keras.layers.Conv2D(4, 3, name="conv")(inputs)
    if batch_norm:
        x = tf.keras.layers.BatchNormalization(name="bn")(x)
    x = tf.keras.layers.Flatten(name="flat")(x)
    model = tf.keras.Model(inputs, tf.keras.layers.Dense(3, activation="softmax", name="out")(x))
    model.compile(Adam(0.05), "categorical_crossentropy", metrics=["accuracy"])
    return model


def input_fn_of(batch):
    """Returns an input_fn of the fixed images in batches of `batch`, repeated in the same order."""
    def input_fn(input_context=None):
        return tf.data.Dataset.from_tensor_slices(({"image": IMAGES}, LABELS)).batch(batch, drop_remainder=True) \
            .repeat()
    return input_fn


def eval_input_fn(input_context=None):
    """Returns the evaluation input: the fixed images once, in batches of 8."""
    return tf.data.Dataset.from_tensor_slices(({"image": IMAGES}, LABELS)).batch(8)


def serving_input_fn():
    """Returns the export's receiver: a float batch of 6x6 images, fed as 'image'."""
    image = tf.compat.v1.placeholder(tf.float32, [None, 6, 6, 1], name="image")
    return tf.estimator.export.ServingInputReceiver({"image": image}, {"image": image})


def trained(model_dir, batch_norm, replicas=1, steps=5, decay=DECAY, global_batch=8, strategy="mirrored"):
    """Returns the Estimator after training to global step `steps` with --ema `decay`, a checkpoint at
    every step (evaluating mirrored over the replicas, under `strategy` 'mirrored')."""
    config = build_run_config(str(model_dir), build_distribution(cpu_replicas=replicas, strategy=strategy),
                              checkpoint_steps=1, summary_steps=100, keep_checkpoints=50, seed=1,
                              mirrored_evaluation=replicas > 1 and strategy == "mirrored")
    estimator = estimator_from_keras(compiled_model(batch_norm), config, ema=decay)
    estimator.train(input_fn_of(global_batch // replicas), max_steps=steps)
    return estimator


@pytest.fixture(scope="module")
def six_step_run(tmp_path_factory):
    """Returns a function of (batch_norm, replicas, strategy) that returns (the Estimator, its model dir) of
    `trained`'s run to step 6 with those settings: trained on the first call, the same afterwards (the
    tests only read its checkpoints, and evaluate or export into folders of their own)."""
    runs = {}

    def run(batch_norm, replicas, strategy):
        key = (batch_norm, replicas, strategy)
        if key not in runs:
            model_dir = tmp_path_factory.mktemp("six-steps")
            runs[key] = trained(model_dir, batch_norm, replicas, steps=6, strategy=strategy), model_dir
        return runs[key]
    return run


def checkpoint_values(model_dir, step):
    """Returns {key: value} of the checkpoint of `step` in `model_dir`."""
    reader = tf.train.load_checkpoint(f"{model_dir}/model.ckpt-{step}")
    return {key: reader.get_tensor(key) for key in reader.get_variable_to_shape_map()}


def global_step(values):
    """Returns the global step a checkpoint's `values` hold (object-based or name-based)."""
    return values.get("global_step", values.get("estimator_global_step/.ATTRIBUTES/VARIABLE_VALUE"))


def shadowed_keys(values):
    """Returns the checkpoint keys of the raw weights that have a shadow."""
    prefix = ema_lib.SHADOW_PREFIX
    return sorted(key[len(prefix):] for key in values if key.startswith(prefix))


@pytest.mark.parametrize("batch_norm", [False, True], ids=["object-based", "name-based"])
@pytest.mark.parametrize("replicas,strategy", [(1, "mirrored"), (2, "mirrored"), (2, "central_storage")])
def test_the_shadows_are_the_moving_average_of_every_checkpointed_step(six_step_run, batch_norm, replicas, strategy):
    assert checkpoint_format(compiled_model(batch_norm)) == ("saver" if batch_norm else "checkpoint")
    _, model_dir = six_step_run(batch_norm, replicas, strategy)
    first = checkpoint_values(model_dir, 0)
    keys = shadowed_keys(first)
    trainable = 4 + (2 if batch_norm else 0)  # conv and out kernels and biases; bn's gamma and beta
    assert len(keys) == trainable, keys
    assert all(key in first for key in keys)  # each names a raw weight
    expected = {key: first[key].astype(np.float64) for key in keys}  # the shadows start at the weights
    for key in keys:
        assert np.array_equal(first[ema_lib.shadow_key(key)], first[key])
    for step in range(1, 7):  # the last saved at the session's end
        values = checkpoint_values(model_dir, step)
        assert global_step(values) == step
        for key in keys:
            expected[key] = DECAY * expected[key] + (1 - DECAY) * values[key]
            shadow = values[ema_lib.shadow_key(key)]
            assert shadow.dtype == np.float32
            np.testing.assert_allclose(shadow, expected[key], rtol=1e-5, atol=1e-6, err_msg=f"{key} at {step}")
        assert any(not np.allclose(values[ema_lib.shadow_key(k)], values[k], atol=1e-4) for k in keys)


def keras_model_with(values, batch_norm, key_of):
    """Returns the test's Keras model holding the checkpoint `values` of each weight (trainable weights
    read from the key `key_of` gives for the raw key), compiled."""
    model = compiled_model(batch_norm)
    layers = [layer for layer in model.layers if layer.weights]
    weights = []
    for index, layer in enumerate(layers):
        for weight in layer.weights:
            attribute = weight.name.split("/")[-1].split(":")[0]
            key = f"layer_with_weights-{index}/{attribute}/.ATTRIBUTES/VARIABLE_VALUE"
            key = key if key in values else weight.name.split(":")[0]
            weights.append(values[key_of(key) if weight.trainable else key])
    model.set_weights(weights)
    return model


@pytest.mark.parametrize("batch_norm", [False, True], ids=["object-based", "name-based"])
@pytest.mark.parametrize("strategy", ["mirrored", "central_storage"])
def test_evaluation_and_the_export_read_the_average_and_raw_weights_evaluates_the_raw(six_step_run, tmp_path,
                                                                                      batch_norm, strategy):
    estimator, model_dir = six_step_run(batch_norm, 2, strategy)
    values = checkpoint_values(model_dir, 6)
    averaged = keras_model_with(values, batch_norm, ema_lib.shadow_key).evaluate(
        IMAGES, LABELS, batch_size=8, verbose=0, return_dict=True)
    raw = keras_model_with(values, batch_norm, lambda key: key).evaluate(
        IMAGES, LABELS, batch_size=8, verbose=0, return_dict=True)
    assert abs(averaged["loss"] - raw["loss"]) > 1e-3  # the comparison can tell them apart
    compared = ema_lib.compare(estimator, eval_input_fn, estimator.latest_checkpoint())
    assert compared["step"] == 6 and compared["decay"] == DECAY
    for figures, keras in ((compared["averaged"], averaged), (compared["raw"], raw)):
        assert figures["loss"] == pytest.approx(keras["loss"], rel=1e-4)
        assert figures["accuracy"] == pytest.approx(keras["accuracy"])
    export = estimator.export_saved_model(str(tmp_path / "export"), serving_input_fn)
    served = tf.saved_model.load(export.decode()).signatures["serving_default"]
    probabilities = next(iter(served(image=tf.constant(IMAGES)).values())).numpy()
    averaged_model = keras_model_with(values, batch_norm, ema_lib.shadow_key)
    np.testing.assert_allclose(probabilities, averaged_model.predict(IMAGES, verbose=0), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("batch_norm", [False, True], ids=["object-based", "name-based"])
def test_a_resumed_run_continues_the_average_exactly(tmp_path, batch_norm):
    # Every step takes all 32 images: a resumed input, which starts over, feeds the same batches.
    trained(tmp_path / "straight", batch_norm, steps=6, global_batch=32)
    trained(tmp_path / "resumed", batch_norm, steps=3, global_batch=32)
    trained(tmp_path / "resumed", batch_norm, steps=6, global_batch=32)  # a new Estimator, from step 3
    straight, resumed = checkpoint_values(tmp_path / "straight", 6), checkpoint_values(tmp_path / "resumed", 6)
    assert sorted(straight) == sorted(resumed) and shadowed_keys(straight)
    for key in straight:
        assert np.array_equal(straight[key], resumed[key]), key


def test_two_replicas_keep_the_shadows_of_one_at_the_same_global_batch(six_step_run):
    one, two = (checkpoint_values(six_step_run(False, replicas, "mirrored")[1], 4) for replicas in (1, 2))
    for key in shadowed_keys(one):
        np.testing.assert_allclose(two[key], one[key], rtol=1e-4, atol=1e-6)  # the raw weights agree
        np.testing.assert_allclose(two[ema_lib.shadow_key(key)], one[ema_lib.shadow_key(key)], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("replicas", [1, 2])
def test_mixed_precision_keeps_float32_shadows(tmp_path, replicas):
    from models.optimizers import precision
    with precision("bf16"):
        estimator = trained(tmp_path, batch_norm=False, replicas=replicas, steps=2)
        compared = ema_lib.compare(estimator, eval_input_fn, estimator.latest_checkpoint())
    assert compared["averaged"]["loss"] != compared["raw"]["loss"]  # the evaluation restored the shadows
    values = checkpoint_values(tmp_path, 2)
    keys = shadowed_keys(values)
    assert len(keys) == 4
    for key in keys:
        assert values[ema_lib.shadow_key(key)].dtype == np.float32
        expected = checkpoint_values(tmp_path, 1)[ema_lib.shadow_key(key)] * DECAY + (1 - DECAY) * values[key]
        np.testing.assert_allclose(values[ema_lib.shadow_key(key)], expected, rtol=1e-5, atol=1e-6)


def test_the_images_jobs_batch_norm_backbone_checkpoints_the_shadows_of_its_trainable_weights(tmp_path):
    from models.backbones import build_image_classifier
    from input_fns import FEATURE_KEY
    tf.keras.utils.set_random_seed(1)
    model = build_image_classifier("mobilenet_v2", 3, (32, 32), 3, trainable_layers=20)
    assert checkpoint_format(model) == "saver"  # BatchNormalization's moving statistics: name-based
    images = np.random.default_rng(1).integers(0, 256, (8, 32, 32, 3)).astype(np.uint8)

    def input_fn(input_context=None):
        return tf.data.Dataset.from_tensor_slices(({FEATURE_KEY: images}, LABELS[:8])).batch(2).repeat()
    config = build_run_config(str(tmp_path), build_distribution(cpu_replicas=2), checkpoint_steps=1,
                              summary_steps=100, keep_checkpoints=10, seed=1)
    estimator_from_keras(model, config, ema=DECAY).train(input_fn, max_steps=2)
    steps = [checkpoint_values(tmp_path, step) for step in range(3)]
    keys = shadowed_keys(steps[0])
    assert len(keys) == len(model.trainable_weights) < len(model.weights)  # frozen layers have no shadow
    for key in keys:
        expected = steps[0][key].astype(np.float64)
        for values in steps[1:]:
            expected = DECAY * expected + (1 - DECAY) * values[key]
        np.testing.assert_allclose(steps[2][ema_lib.shadow_key(key)], expected, rtol=1e-5, atol=1e-6, err_msg=key)


@pytest.mark.parametrize("step,says", [(0, "holds only the first checkpoint (step 0, nothing trained)"),
                                       (5, "was trained without --ema and holds no average")])
def test_ema_on_a_model_dir_without_an_average_names_what_to_do(tmp_path, step, says):
    import types
    from pipeline.errors import FlagError
    from pipeline.model_dir import write_checkpoint_state
    prefix = str(tmp_path / f"model.ckpt-{step}")
    tf.train.Checkpoint(weights=tf.Variable([1.0])).write(prefix)
    write_checkpoint_state(str(tmp_path), [prefix])
    with pytest.raises(FlagError, match=says.replace("(", r"\(").replace(")", r"\)")):
        ema_lib.check(types.SimpleNamespace(ema=0.99, strategy="mirrored", model_dir=str(tmp_path)), True)


def test_a_decay_that_averages_over_more_steps_than_the_run_trains_is_warned_of():
    """--ema 0.99 on a 10-step run exported a model at chance without a word."""
    from pipeline.ema import too_few_steps
    assert too_few_steps(0.99, 10).startswith("--ema 0.99: after the 10 steps this run trains in all, 90% of the "
                                              "average is still the first, untrained weights (it averages over about "
                                              "the last 100 steps")
    assert "37% of the average" in too_few_steps(0.99, 100) and "35% of the average" in too_few_steps(0.9, 10)
    assert too_few_steps(0.99, 300) is None and too_few_steps(0.9, 30) is None and too_few_steps(None, 1) is None
