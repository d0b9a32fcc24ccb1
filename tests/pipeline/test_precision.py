"""--precision reaches the Estimator's graph: float32 variables, 16-bit convolutions, a float32
softmax, and for fp16 a loss-scaling optimizer; and the warnings for devices that run it slowly."""
import numpy as np
import pytest
import tensorflow as tf

from models.fashion_cnn import build_fashion_cnn
from models.optimizers import precision
from pipeline.distribution import build_distribution
from pipeline.estimator import estimator_from_keras, build_run_config
from pipeline.machine import describe_cpu, precision_warning


class GraphInspector(tf.estimator.SessionRunHook):
    """Records the training graph's op and variable dtypes when the session starts."""

    def begin(self):
        graph = tf.compat.v1.get_default_graph()
        self.conv_dtypes = {op.outputs[0].dtype for op in graph.get_operations() if op.type == "Conv2D"}
        self.softmax_dtypes = {op.outputs[0].dtype for op in graph.get_operations() if op.type == "Softmax"}
        self.variable_dtypes = {v.dtype.base_dtype for v in tf.compat.v1.trainable_variables()}
        self.variable_names = [v.op.name for v in tf.compat.v1.global_variables()]


def input_fn(input_context=None):
    rng = np.random.default_rng(0)
    images = rng.random((64, 28, 28, 1), dtype=np.float32)
    labels = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 64)]
    return tf.data.Dataset.from_tensor_slices(({"image": images}, labels)).batch(16).repeat()


@pytest.mark.parametrize("name, math", [("fp32", tf.float32), ("bf16", tf.bfloat16), ("fp16", tf.float16)])
@pytest.mark.parametrize("replicas", [1, 2])
def test_the_policy_reaches_the_estimators_graph(tmp_path, name, math, replicas):
    inspector = GraphInspector()
    with precision(name):
        model = build_fashion_cnn(learning_rate=0.001)
        config = build_run_config(str(tmp_path), build_distribution(cpu_replicas=replicas), 100, 100)
        estimator = estimator_from_keras(model, config)
        estimator.train(input_fn, max_steps=2, hooks=[inspector])
    assert tf.keras.mixed_precision.global_policy().name == "float32"  # restored on the way out
    assert inspector.conv_dtypes == {math}
    assert inspector.variable_dtypes == {tf.float32}
    assert inspector.softmax_dtypes == {tf.float32}
    loss_scaled = any(n.endswith("current_loss_scale") for n in inspector.variable_names)
    assert loss_scaled == (name == "fp16")
    evaluation = estimator.evaluate(input_fn, steps=2)
    assert np.isfinite(evaluation["loss"])


def cpuinfo(folder, flags):
    folder.mkdir()
    path = folder / "cpuinfo"
    path.write_text(f"processor\t: 0\nmodel name\t: Test CPU 9000\nflags\t\t: {' '.join(flags)}\n")
    return str(path)


def test_precisions_a_cpu_runs_slowly_are_warned_about(tmp_path):
    with_bf16 = cpuinfo(tmp_path / "a", ["avx2", "avx512f", "avx512_bf16"])
    without = cpuinfo(tmp_path / "b", ["avx2", "avx512f"])
    assert precision_warning("fp32", False, without) is None
    assert precision_warning("bf16", False, with_bf16) is None
    assert "without AVX512_BF16 or AMX" in precision_warning("bf16", False, without)
    assert "fp16 on a CPU" in precision_warning("fp16", False, with_bf16)
    assert describe_cpu(with_bf16).startswith("Test CPU 9000, ")
    assert "avx512f avx512_bf16, no amx_tile amx_bf16" in describe_cpu(with_bf16)


def test_resuming_with_another_precision_that_changes_the_variables_is_one_line(tmp_path, capsys):
    from pipeline.cli import train_main
    from pipeline.tasks.fashion import TASK

    common = ["--synthetic", "--batch-size", "16", "--model-dir", str(tmp_path), "--warm-up-steps", "0"]
    assert train_main(TASK, common + ["--max-steps", "3"]) == 0
    checkpoint = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("model.ckpt-3")}
    capsys.readouterr()
    # fp16 adds the loss-scaling optimizer's variables, which an fp32 checkpoint lacks.
    assert train_main(TASK, common + ["--max-steps", "6", "--precision", "fp16"]) == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert ": error: the checkpoint in " in last
    assert "--precision" in last and "Traceback" not in last
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("model.ckpt-3")} == checkpoint
    # bf16 keeps every variable float32: the same checkpoint resumes.
    assert train_main(TASK, common + ["--max-steps", "6", "--precision", "bf16"]) == 0
