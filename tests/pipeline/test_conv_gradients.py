"""pipeline.conv_gradients: a Conv2D's weight gradient as a matmul, against a NumPy reference computed from
the convolution's definition, and which ops take them."""
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from models.fashion_cnn import build_fashion_cnn
from pipeline import conv_gradients
from pipeline.distribution import build_distribution
from pipeline.estimator import build_run_config, estimator_from_keras
from pipeline.flags import build_parser
from pipeline.machine import conv_gradients_choice
from pipeline.roles import run
from pipeline.tasks.fashion import TASK
from tests.conftest import write_cpuinfo


def reference_gradients(x, w, up, padding):
    """Returns (d x, d w) of sum(conv2d(x, w) * up), stride 1, NHWC, from the convolution's definition."""
    kh, kw = w.shape[:2]
    if padding == "SAME":
        top, left = (kh - 1) // 2, (kw - 1) // 2
        x = np.pad(x, [(0, 0), (top, kh - 1 - top), (left, kw - 1 - left), (0, 0)])
    else:
        top = left = 0
    oh, ow = up.shape[1:3]
    dx, dw = np.zeros_like(x), np.zeros_like(w)
    for i in range(kh):
        for j in range(kw):
            window = x[:, i:i + oh, j:j + ow, :]
            dw[i, j] = np.einsum("nhwc,nhwo->co", window, up)
            dx[:, i:i + oh, j:j + ow, :] += np.einsum("nhwo,co->nhwc", up, w[i, j])
    height, width = x.shape[1] - (kh - 1 if padding == "SAME" else 0), x.shape[2] - (kw - 1 if padding == "SAME" else 0)
    return dx[:, top:top + height, left:left + width, :], dw


def gradients(x, w, up, padding, by_matmul=True, strides=1):
    """Returns (d x, d w, the graph's op types) of sum(conv2d(x, w) * up) built in a graph."""
    graph = tf.Graph()
    with graph.as_default():
        xt, wt = tf.constant(x), tf.constant(w)
        with conv_gradients.gradients_by_matmul(by_matmul):
            y = tf.nn.conv2d(xt, wt, strides, padding)
        grads = tf.gradients(y, [xt, wt], tf.constant(up))
        with tf.compat.v1.Session() as session:
            dx, dw = session.run(grads)
    return dx, dw, {op.type for op in graph.get_operations()}


@pytest.mark.parametrize("size, padding", [(4, "SAME"), (5, "VALID"), (2, "SAME"), (3, "VALID")])
def test_matmul_gradients_equal_the_definitions(size, padding):
    rng = np.random.RandomState(size)
    channels = conv_gradients.MIN_INPUT_CHANNELS
    x = rng.randn(3, size, size, channels).astype(np.float32)
    w = rng.randn(3, 3, channels, 4).astype(np.float32)
    out = size if padding == "SAME" else size - 2
    up = rng.randn(3, out, out, 4).astype(np.float32)
    dx, dw, types = gradients(x, w, up, padding)
    assert "MatMul" in types and "Conv2DBackpropFilter" not in types and "Conv2DBackpropInput" in types
    want_dx, want_dw = reference_gradients(x, w, up, padding)
    np.testing.assert_allclose(dx, want_dx, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(dw, want_dw, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kernel, padding", [((2, 2), "SAME"), ((1, 1), "VALID"), ((2, 3), "SAME"), ((3, 2), "VALID")])
def test_the_weight_gradient_of_other_kernels_equals_the_definition(kernel, padding):
    """weight_gradient itself for kernels by_matmul leaves to oneDNN: even, 1x1 and non-square, an unknown batch."""
    rng = np.random.RandomState(sum(kernel))
    x = rng.randn(2, 5, 6, 3).astype(np.float32)
    w = rng.randn(*kernel, 3, 4).astype(np.float32)
    out = (5, 6) if padding == "SAME" else (5 - kernel[0] + 1, 6 - kernel[1] + 1)
    up = rng.randn(2, *out, 4).astype(np.float32)
    graph = tf.Graph()
    with graph.as_default():
        xt = tf.compat.v1.placeholder(tf.float32, [None, 5, 6, 3])
        upt = tf.compat.v1.placeholder(tf.float32, [None, *out, 4])
        dw = conv_gradients.weight_gradient(xt, upt, w.shape, out, padding.encode())
        with tf.compat.v1.Session() as session:
            got = session.run(dw, {xt: x, upt: up})
    np.testing.assert_allclose(got, reference_gradients(x, w, up, padding)[1], rtol=1e-4, atol=1e-4)


def test_bfloat16_gradients_equal_the_definitions_within_its_rounding():
    rng = np.random.RandomState(7)
    x = rng.randn(4, 4, 4, 64).astype(np.float32)
    w = rng.randn(3, 3, 64, 8).astype(np.float32)
    up = rng.randn(4, 4, 4, 8).astype(np.float32)
    graph = tf.Graph()
    with graph.as_default():
        xt, wt = tf.cast(tf.constant(x), tf.bfloat16), tf.cast(tf.constant(w), tf.bfloat16)
        with conv_gradients.gradients_by_matmul(True):
            y = tf.nn.conv2d(xt, wt, 1, "SAME")
        dw = tf.cast(tf.gradients(y, wt, tf.cast(tf.constant(up), tf.bfloat16))[0], tf.float32)
        assert "MatMul" in {op.type for op in graph.get_operations()}
        with tf.compat.v1.Session() as session:
            got = session.run(dw)
    want = reference_gradients(x, w, up, "SAME")[1]
    assert np.abs(got - want).max() <= 0.02 * np.abs(want).max()


@pytest.mark.parametrize("size, channels, strides, kernel", [(15, 64, 1, 3), (4, 32, 1, 3), (4, 64, 2, 3),
                                                              (4, 64, 1, 1), (4, 64, 1, 2)])
def test_other_convolutions_keep_tensorflows_gradients(size, channels, strides, kernel):
    """More output positions than MAX_OUTPUT_POSITIONS, fewer input channels than MIN_INPUT_CHANNELS, a stride,
    or a kernel other than 3x3: TensorFlow's kernels, as without the scope."""
    assert (size * size > conv_gradients.MAX_OUTPUT_POSITIONS or channels < conv_gradients.MIN_INPUT_CHANNELS
            or strides > 1 or kernel != 3)
    rng = np.random.RandomState(0)
    x = rng.randn(2, size, size, channels).astype(np.float32)
    w = rng.randn(kernel, kernel, channels, 2).astype(np.float32)
    out = -(-size // strides)
    up = rng.randn(2, out, out, 2).astype(np.float32)
    dx, dw, types = gradients(x, w, up, "SAME", strides=strides)
    assert "MatMul" not in types and {"Conv2DBackpropFilter", "Conv2DBackpropInput"} <= types
    plain_dx, plain_dw, _ = gradients(x, w, up, "SAME", by_matmul=False, strides=strides)
    np.testing.assert_array_equal(dx, plain_dx)
    np.testing.assert_array_equal(dw, plain_dw)


def test_without_the_scope_nothing_changes():
    rng = np.random.RandomState(1)
    x, w, up = rng.randn(1, 3, 3, 64), rng.randn(3, 3, 64, 2), rng.randn(1, 3, 3, 2)
    _, _, types = gradients(x.astype(np.float32), w.astype(np.float32), up.astype(np.float32), "SAME", by_matmul=False)
    assert "MatMul" not in types and "Conv2DBackpropFilter" in types


@pytest.mark.parametrize("requested, precision, uses_gpus, flags, expected", [
    ("auto", "bf16", False, "avx512f avx512_bf16 amx_tile amx_bf16", "matmul"),
    ("auto", "bf16-amp", False, "avx512f avx512_bf16 amx_tile amx_bf16", "matmul"),
    ("auto", "fp32", False, "avx512f avx512_bf16 amx_tile amx_bf16", "onednn"),
    ("auto", "bf16", False, "avx512f avx512_bf16", "onednn"),
    ("auto", "bf16", True, "avx512f avx512_bf16 amx_tile amx_bf16", "onednn"),
    ("matmul", "fp32", False, "", "matmul"), ("onednn", "bf16", False, "amx_bf16", "onednn")])
def test_auto_picks_matmuls_for_bfloat16_on_amx_only(tmp_path, requested, precision, uses_gpus, flags, expected):
    mode, why = conv_gradients_choice(requested, precision, uses_gpus, write_cpuinfo(tmp_path, flags))
    assert mode == expected
    assert (why is None) == (requested != "auto")


def graph_ops_after_one_step(model_dir, by_matmul, replicas=1):
    """Returns (the trained weights after one Estimator step of the Fashion CNN, the training graph's op types);
    asserts that a Conv2D built after the model_fn (in a hook's begin) keeps TensorFlow's gradient."""
    class Types(tf.estimator.SessionRunHook):
        def begin(self):
            self.types = [op.type for op in tf.compat.v1.get_default_graph().get_operations()]
            after = tf.nn.conv2d(tf.zeros([1, 3, 3, 64]), tf.zeros([3, 3, 64, 1]), 1, "SAME")
            assert "_gradient_op_type" not in after.op.node_def.attr
    tf.keras.utils.set_random_seed(3)
    model = build_fashion_cnn(learning_rate=0.01)
    config = build_run_config(model_dir, build_distribution(cpu_replicas=replicas), 100, 100, seed=3)
    estimator = estimator_from_keras(model, config, conv_gradients_by_matmul=by_matmul)
    types = Types()
    estimator.train(input_fn, max_steps=1, hooks=[types])
    names = [name for name, _ in tf.train.list_variables(model_dir) if name.endswith("kernel/.ATTRIBUTES/VARIABLE_VALUE")]
    return {name: tf.train.load_variable(model_dir, name) for name in names}, types.types


def input_fn(input_context=None):
    rng = np.random.default_rng(0)
    images = rng.random((32, 28, 28, 1), dtype=np.float32)
    labels = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 32)]
    return tf.data.Dataset.from_tensor_slices(({"image": images}, labels)).batch(32).repeat()


@pytest.mark.parametrize("replicas", [1, 2])
def test_an_estimator_step_trains_the_same_weights_either_way(tmp_path, replicas):
    """The Fashion CNN's third convolution (64 input channels, 3x3 outputs) takes the matmul on every replica;
    its first two keep oneDNN's kernel; the weights after a step equal those of TensorFlow's own gradients."""
    plain, plain_types = graph_ops_after_one_step(str(tmp_path / "onednn"), False, replicas)
    matmul, matmul_types = graph_ops_after_one_step(str(tmp_path / "matmul"), True, replicas)
    assert plain_types.count("Conv2DBackpropFilter") == 3 * replicas
    assert matmul_types.count("Conv2DBackpropFilter") == 2 * replicas
    assert matmul_types.count("MatMul") == plain_types.count("MatMul") + replicas
    assert plain.keys() == matmul.keys() and len(plain) == 5  # 3 convolutions, 2 dense layers
    for name in plain:
        np.testing.assert_allclose(matmul[name], plain[name], rtol=1e-4, atol=1e-6)


def test_a_run_records_how_it_computed_them(tmp_path, capsys):
    model_dir = str(tmp_path / "run")
    run(TASK, build_parser(TASK).parse_args(["--synthetic", "--max-steps", "1", "--batch-size", "8", "--precision",
                                             "fp32", "--conv-gradients", "matmul", "--model-dir", model_dir]))
    written = json.load(open(os.path.join(model_dir, "results.json")))
    assert written["conv_gradients"] == "matmul" and written["conv_gradients_reason"] is None
    header = next(line for line in capsys.readouterr().out.splitlines() if line.strip().startswith("precision:"))
    assert "weight gradients as matmuls" in header and "auto" not in header


def test_only_training_graphs_carry_the_override(tmp_path):
    """A prediction graph (what an export saves) names no gradient of this project's; the override ends with the
    model_fn, so ops built after it keep TensorFlow's."""
    estimator = estimator_from_keras(build_fashion_cnn(learning_rate=0.01), build_run_config(
        str(tmp_path), build_distribution(cpu_replicas=1), 100, 100), conv_gradients_by_matmul=True)
    tagged = {}
    for mode in (tf.estimator.ModeKeys.TRAIN, tf.estimator.ModeKeys.PREDICT):
        with tf.Graph().as_default() as graph:
            tf.compat.v1.train.get_or_create_global_step()
            features = {"image": tf.zeros([4, 28, 28, 1])}
            labels = tf.one_hot([0, 1, 2, 3], 10) if mode == tf.estimator.ModeKeys.TRAIN else None
            estimator.model_fn(features, labels, mode, estimator.config)
            after = tf.nn.conv2d(tf.zeros([1, 3, 3, 64]), tf.zeros([3, 3, 64, 1]), 1, "SAME")
            tagged[mode] = [op.name for op in graph.get_operations()
                            if op.type == "Conv2D" and "_gradient_op_type" in op.node_def.attr]
            assert "_gradient_op_type" not in after.op.node_def.attr
    assert len(tagged[tf.estimator.ModeKeys.TRAIN]) == 3 and tagged[tf.estimator.ModeKeys.PREDICT] == []
