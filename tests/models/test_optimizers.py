"""--optimizer and --weight-decay (models.optimizers.build_optimizer) against NumPy references of Adam,
Nesterov SGD and decoupled weight decay (Loshchilov and Hutter): each step multiplies the kernels, and only
them, by 1 - rate x W before the optimizer's own update."""
import numpy as np
import pytest
import tensorflow as tf

from models import SGD_MOMENTUM
from models.optimizers import build_optimizer

RATE, DECAY, STEPS = 0.1, 0.5, 3


def gradients():
    """Returns STEPS fixed (kernel, bias) gradients."""
    rng = np.random.default_rng(0)
    return [(rng.normal(size=(3, 2)).astype(np.float32), rng.normal(size=2).astype(np.float32)) for _ in range(STEPS)]


def start():
    rng = np.random.default_rng(1)
    return rng.normal(size=(3, 2)).astype(np.float32), rng.normal(size=2).astype(np.float32)


def numpy_adam(weight_decay, beta_1=0.9, beta_2=0.999, epsilon=1e-7):
    """Returns (kernel, bias) after STEPS of AdamW, as Keras's legacy Adam updates (its epsilon outside the root)."""
    params = [p.copy() for p in start()]
    moments = [[np.zeros_like(p), np.zeros_like(p)] for p in params]
    for t, grads in enumerate(gradients(), start=1):
        rate = RATE * np.sqrt(1 - beta_2 ** t) / (1 - beta_1 ** t)
        for p, g, (m, v), decays in zip(params, grads, moments, (True, False)):
            if decays:
                p -= RATE * weight_decay * p
            m[:] = beta_1 * m + (1 - beta_1) * g
            v[:] = beta_2 * v + (1 - beta_2) * g * g
            p -= rate * m / (np.sqrt(v) + epsilon)
    return params


def numpy_sgd(weight_decay):
    """Returns (kernel, bias) after STEPS of SGDW with Nesterov momentum, as Keras's legacy SGD updates."""
    params = [p.copy() for p in start()]
    velocities = [np.zeros_like(p) for p in params]
    for grads in gradients():
        for p, g, velocity, decays in zip(params, grads, velocities, (True, False)):
            if decays:
                p -= RATE * weight_decay * p
            velocity[:] = SGD_MOMENTUM * velocity - RATE * g
            p += SGD_MOMENTUM * velocity - RATE * g
    return params


REFERENCES = {"adam": numpy_adam, "sgd": numpy_sgd}


def stepped(optimizer):
    """Returns (kernel, bias) after `optimizer` applied gradients() to start()'s, in a graph of its own."""
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        kernel, bias = (tf.Variable(value) for value in start())
        feeds = [(tf.compat.v1.placeholder(tf.float32, (3, 2)), tf.compat.v1.placeholder(tf.float32, (2,)))]
        step = optimizer.apply_gradients(list(zip(feeds[0], (kernel, bias))))
        session.run(tf.compat.v1.global_variables_initializer())
        for grads in gradients():
            session.run(step, dict(zip(feeds[0], grads)))
        return session.run([kernel, bias])


@pytest.mark.parametrize("name", ["adam", "sgd"])
@pytest.mark.parametrize("weight_decay", [0.0, DECAY])
def test_each_optimizer_steps_as_its_reference(name, weight_decay):
    kernel, bias = stepped(build_optimizer(name, RATE, weight_decay))
    want_kernel, want_bias = REFERENCES[name](weight_decay)
    np.testing.assert_allclose(kernel, want_kernel, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(bias, want_bias, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["adam", "sgd"])
def test_the_decay_moves_the_kernels_only(name):
    """Not vacuous: the decay changes the kernel by about STEPS x RATE x DECAY of itself, and not the bias."""
    plain, decayed = stepped(build_optimizer(name, RATE)), stepped(build_optimizer(name, RATE, DECAY))
    assert np.abs(decayed[0] - plain[0]).max() > 0.05
    np.testing.assert_array_equal(decayed[1], plain[1])


@pytest.mark.parametrize("name", ["adam", "sgd"])
def test_the_settings_survive_a_clone_from_config(name):
    """model_to_estimator builds the model's optimizer again from its config."""
    optimizer = build_optimizer(name, RATE, DECAY)
    clone = optimizer.__class__.from_config(optimizer.get_config())
    assert clone.weight_decay == DECAY
    if name == "sgd":
        assert clone.nesterov and clone.get_config()["momentum"] == pytest.approx(SGD_MOMENTUM)
    np.testing.assert_allclose(stepped(clone)[0], REFERENCES[name](DECAY)[0], rtol=1e-5, atol=1e-6)
