"""One training step mirrored over 2 replicas must equal one step on 1 replica
at the same global batch, from the same weights and data. A wrong loss scale
or batch split shows up here as weights that differ."""
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.distribute import cross_device_ops as cross_device_ops_lib

from models.fashion_cnn import build_fashion_cnn
from models.optimizers import build_optimizer, precision
from pipeline.distribution import DistributionPlan, build_distribution, split_cpu
from pipeline.estimator import estimator_from_keras, build_run_config

GLOBAL_BATCH = 32
STEPS = 2


def data():
    rng = np.random.default_rng(0)
    images = rng.random((GLOBAL_BATCH * STEPS, 28, 28, 1), dtype=np.float32)
    labels = np.eye(10, dtype=np.float32)[rng.integers(0, 10, GLOBAL_BATCH * STEPS)]
    return images, labels


def input_fn_for(batch_size):
    images, labels = data()

    def input_fn(input_context=None):
        # Replicas take consecutive batches from one pipeline, so with batch
        # GLOBAL_BATCH/2 the two replicas of step k see exactly the images of
        # the single replica's step k.
        return tf.data.Dataset.from_tensor_slices(({"image": images}, labels)).batch(batch_size).repeat()
    return input_fn


def train(model, model_dir, plan):
    config = build_run_config(str(model_dir), plan, checkpoint_steps=100, summary_steps=100)
    estimator = estimator_from_keras(model, config)
    estimator.train(input_fn_for(GLOBAL_BATCH // plan.replicas), max_steps=STEPS)
    checkpoint = estimator.latest_checkpoint()
    return {name: tf.train.load_variable(checkpoint, name)
            for name, _ in tf.train.list_variables(checkpoint) if "VARIABLE_VALUE" in name}


OPTIMIZERS = {
    # Adam at the design's rate: it divides by sqrt(v), so at large rates float
    # summation-order noise in near-zero gradients grows to ~1e-5 in a few weights.
    "adam": lambda: tf.keras.optimizers.legacy.Adam(learning_rate=0.001),
    "sgd": lambda: tf.keras.optimizers.legacy.SGD(learning_rate=0.05),
    "v1-sgd": lambda: tf.compat.v1.train.GradientDescentOptimizer(learning_rate=0.05),
    # --optimizer and --weight-decay: the decay is applied to each replica's copy of a kernel, once.
    "adamw": lambda: build_optimizer("adam", 0.001, weight_decay=2.0),
    "sgdw": lambda: build_optimizer("sgd", 0.05, weight_decay=2.0),
}


def compiled_model(optimizer, weights=None):
    # A fresh model per Estimator: model_to_estimator cannot convert one model twice.
    model = build_fashion_cnn(learning_rate=0.001)
    model.compile(OPTIMIZERS[optimizer](), "categorical_crossentropy")
    if weights is not None:
        model.set_weights(weights)
    return model


@pytest.mark.parametrize("optimizer, strategy", [("sgd", "mirrored"), ("adam", "mirrored"),
                                                ("sgd", "central_storage"), ("adam", "central_storage"),
                                                ("adamw", "mirrored"), ("sgdw", "mirrored"),
                                                ("sgdw", "central_storage")])
def test_two_replicas_take_the_same_steps_as_one(tmp_path, optimizer, strategy):
    tf.keras.utils.set_random_seed(1)
    initial = compiled_model(optimizer).get_weights()
    one = train(compiled_model(optimizer, initial), tmp_path / "one", build_distribution(cpu_replicas=1))
    two = train(compiled_model(optimizer, initial), tmp_path / "two",
                build_distribution(cpu_replicas=2, strategy=strategy))

    assert one.keys() == two.keys()
    kernels = sorted(k for k in one if k.endswith("kernel/.ATTRIBUTES/VARIABLE_VALUE"))
    assert len(kernels) == 5
    # The steps really moved the weights, so agreement below is not vacuous.
    moved = max(np.abs(one[k] - w).max() for k, w in zip(kernels, [w for w in initial if w.ndim > 1]))
    assert moved > 1e-3
    for name in one:  # weights, and for Adam its moment slots, which carry the gradient's scale
        np.testing.assert_allclose(two[name], one[name], rtol=1e-4, atol=1e-6, err_msg=name)


def test_the_comparison_catches_a_wrongly_scaled_update(tmp_path):
    # tf.compat.v1.train optimizers under model_to_estimator + MirroredStrategy
    # apply 1/replicas of the update: the reason the models use legacy Keras ones.
    tf.keras.utils.set_random_seed(1)
    initial = compiled_model("v1-sgd").get_weights()
    one = train(compiled_model("v1-sgd", initial), tmp_path / "one", build_distribution(cpu_replicas=1))
    two = train(compiled_model("v1-sgd", initial), tmp_path / "two", build_distribution(cpu_replicas=2))
    kernel = "layer_with_weights-4/kernel/.ATTRIBUTES/VARIABLE_VALUE"
    start = initial[-2]
    ratio = np.abs(two[kernel] - start).sum() / np.abs(one[kernel] - start).sum()
    assert 0.4 < ratio < 0.6


def test_two_replicas_take_the_same_steps_as_one_in_bf16(tmp_path):
    """Under --precision bf16 the math is bfloat16 (8 significant bits): one replica's batch of
    32 and two replicas' batches of 16 round differently, so two steps agree only to about
    bf16's precision compounded. Measured here: Adam's first moments (which carry the
    gradient's scale) differ by 0.2-4.6% in norm per kernel and the weights' moves by
    4.5-5.7%. The tolerance, 15%, is three times that and a third of what a wrongly scaled
    loss or a lost half-batch gives (50% of the moments)."""
    with precision("bf16"):
        tf.keras.utils.set_random_seed(1)
        initial = build_fashion_cnn(learning_rate=0.001).get_weights()

        def model():  # made just before its Estimator, as compiled_model does
            built = build_fashion_cnn(learning_rate=0.001)
            built.set_weights(initial)
            return built
        one = train(model(), tmp_path / "one", build_distribution(cpu_replicas=1))
        two = train(model(), tmp_path / "two", build_distribution(cpu_replicas=2))
    assert one.keys() == two.keys()
    moments = sorted(k for k in one if k.endswith("kernel/.OPTIMIZER_SLOT/optimizer/m/.ATTRIBUTES/VARIABLE_VALUE"))
    kernels = sorted(k for k in one if k.endswith("kernel/.ATTRIBUTES/VARIABLE_VALUE"))
    assert len(moments) == len(kernels) == 5
    for name in moments:
        assert np.linalg.norm(two[name] - one[name]) / np.linalg.norm(one[name]) < 0.15, name
    for name, start in zip(kernels, [w for w in initial if w.ndim > 1]):
        moved_one, moved_two = one[name] - start, two[name] - start
        assert np.linalg.norm(moved_one) > 1e-3
        assert np.linalg.norm(moved_two - moved_one) / np.linalg.norm(moved_one) < 0.15, name


@pytest.mark.parametrize("optimizer", ["adamw", "sgdw"])
def test_the_estimator_decays_the_kernels_as_a_keras_loop_with_the_decay_by_hand(tmp_path, optimizer):
    """model_to_estimator clones the model's optimizer from its config: the decay must survive that. The reference
    is a Keras training loop of plain Adam or Nesterov SGD with each kernel decayed by hand before its step."""
    tf.keras.utils.set_random_seed(1)
    initial = compiled_model(optimizer).get_weights()
    trained = train(compiled_model(optimizer, initial), tmp_path / "one", build_distribution(cpu_replicas=1))
    made = OPTIMIZERS[optimizer]()
    rate, decay = float(made.learning_rate), made.weight_decay
    plain = tf.keras.optimizers.legacy.Adam(rate) if optimizer == "adamw" else \
        tf.keras.optimizers.legacy.SGD(rate, momentum=0.9, nesterov=True)
    model = build_fashion_cnn(learning_rate=rate)
    model.set_weights(initial)
    images, labels = data()
    for step in range(STEPS):
        batch = slice(step * GLOBAL_BATCH, (step + 1) * GLOBAL_BATCH)
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.keras.losses.categorical_crossentropy(labels[batch], model(images[batch])))
        grads = tape.gradient(loss, model.trainable_variables)
        for variable in model.trainable_variables:
            if variable.shape.rank > 1:
                variable.assign_sub(rate * decay * variable)
        plain.apply_gradients(zip(grads, model.trainable_variables))
    kernels = sorted(k for k in trained if k.endswith("kernel/.ATTRIBUTES/VARIABLE_VALUE"))
    want = [v.numpy() for v in model.trainable_variables if v.shape.rank > 1]
    assert len(kernels) == len(want) == 5
    for name, expected, before in zip(kernels, want, [w for w in initial if w.ndim > 1]):
        assert np.abs(expected - before).max() > 1e-3, name
        np.testing.assert_allclose(trained[name], expected, rtol=1e-4, atol=1e-5, err_msg=name)


class _ReductionNotingDevices(tf.distribute.ReductionToOneDevice):
    """ReductionToOneDevice noting, for each batch it reduces, whether every value and its destination sit on the
    same devices: NcclAllReduce's condition for its all-reduce (else it reduces on one GPU, value by value). In
    the class, not the instance: the Estimator reduces through a copy of its strategy."""
    devices_match = []

    def __init__(self):
        super().__init__(reduce_to_device="/cpu:0")

    def batch_reduce_implementation(self, reduce_op, value_destination_pairs, options):
        match = cross_device_ops_lib._all_devices_match(value_destination_pairs)  # noqa: SLF001 - TF 2.15's
        _ReductionNotingDevices.devices_match.append(match)
        return super().batch_reduce_implementation(reduce_op, value_destination_pairs, options)


@pytest.mark.parametrize("precision_name", ["fp32", "bf16", "fp16"])
def test_the_gradients_reach_the_all_reduce_on_the_devices_of_their_variables(tmp_path, precision_name):
    """Under fp16 Keras's loss scaling summed the gradients toward each replica's wrapper of the variable, whose
    devices are the primary replica's alone: NCCL's all-reduce was skipped on GPUs (no GPU here: the condition
    it checks is checked)."""
    _ReductionNotingDevices.devices_match = []
    reduction = _ReductionNotingDevices()
    devices = split_cpu(2)
    plan = DistributionPlan(tf.distribute.MirroredStrategy(devices, cross_device_ops=reduction), 2, devices,
                            "2 logical CPU devices")
    with precision(precision_name):
        train(build_fashion_cnn(learning_rate=0.001), tmp_path, plan)
    noted = _ReductionNotingDevices.devices_match
    assert noted and all(noted), noted
