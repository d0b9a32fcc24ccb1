"""--precision bf16-amp: a float32 model whose eligible ops TensorFlow's oneDNN graph rewrite runs in
bfloat16. It must reach the Estimator's sessions (which ignore tf.config.optimizer's options), reach
tf.function graphs (the benchmark's other engines) only while its precision is entered, keep the
variables float32, and be refused where the rewrite would leave the model float32."""
import collections
import json
import os
import subprocess
import sys

import pytest
import tensorflow as tf
from tensorflow.core.protobuf import rewriter_config_pb2

from models.optimizers import ONEDNN_BF16_REWRITE, precision
from pipeline.estimator import session_config
from pipeline.machine import graph_rewrite_unavailable
from tests.conftest import write_cpuinfo

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ON = rewriter_config_pb2.RewriterConfig.ON


def test_the_sessions_config_carries_the_rewrite_only_for_bf16_amp():
    assert session_config(precision="fp32") is None and session_config(precision="bf16") is None
    config = session_config(intra_op_threads=2, precision="bf16-amp")
    assert config.graph_options.rewrite_options.auto_mixed_precision_onednn_bfloat16 == ON
    assert config.intra_op_parallelism_threads == 2 and config.allow_soft_placement
    assert session_config(xla=True).graph_options.rewrite_options.auto_mixed_precision_onednn_bfloat16 != ON


def test_tf_functions_get_the_rewrite_only_while_the_precision_is_entered():
    assert ONEDNN_BF16_REWRITE not in tf.config.optimizer.get_experimental_options()
    with precision("bf16-amp"):
        assert tf.config.optimizer.get_experimental_options()[ONEDNN_BF16_REWRITE] is True
        assert tf.keras.mixed_precision.global_policy().name == "float32"  # the model itself stays float32
    assert ONEDNN_BF16_REWRITE not in tf.config.optimizer.get_experimental_options()
    with precision("bf16"):
        assert ONEDNN_BF16_REWRITE not in tf.config.optimizer.get_experimental_options()


@pytest.mark.parametrize("uses_gpus, flags, refused", [(True, "avx512f", "CPUs only"),
                                                       (False, "fma", "no AVX-512"),
                                                       (False, "avx512f", None),
                                                       (False, "avx512f avx512_bf16 amx_bf16", None)])
def test_the_rewrite_is_refused_where_it_would_leave_the_model_float32(tmp_path, uses_gpus, flags, refused):
    reason = graph_rewrite_unavailable(uses_gpus, write_cpuinfo(tmp_path, flags))
    assert (reason is None) == (refused is None)
    if refused:
        assert refused in reason and "--precision bf16" in reason


def executed_kernels(log):
    """Returns Counter of (primitive, implementation, source type) of oneDNN's ONEDNN_VERBOSE exec lines."""
    kernels = collections.Counter()
    for line in log.splitlines():
        fields = line.split(",")
        if len(fields) > 6 and fields[0] == "onednn_verbose" and "exec" in fields[1:3]:
            at = fields.index("exec")
            kernels[(fields[at + 2], fields[at + 3], fields[at + 5].split("::")[0])] += 1
    return kernels


def train(tmp_path, name, precision_flag):
    model_dir = tmp_path / name
    env = dict(os.environ, ONEDNN_VERBOSE="1")
    result = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "train_fashion.py"), "--synthetic",
                             "--max-steps", "2", "--batch-size", "16", "--precision", precision_flag,
                             "--model-dir", str(model_dir)], env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    return model_dir, executed_kernels(result.stdout + result.stderr)


@pytest.mark.skipif(graph_rewrite_unavailable(False) is not None, reason="this CPU has no AVX-512: refused there")
def test_a_bf16_amp_run_convolves_in_bfloat16_and_keeps_float32_variables(tmp_path):
    model_dir, kernels = train(tmp_path, "amp", "bf16-amp")
    _, plain = train(tmp_path, "fp32", "fp32")
    convolutions = {(impl, src) for (primitive, impl, src), _ in kernels.items() if primitive == "convolution"}
    assert any(src == "src_bf16" for _, src in convolutions), convolutions
    assert not any(primitive == "convolution" and src == "src_bf16" for primitive, _, src in plain), plain
    results = json.load(open(model_dir / "results.json"))
    assert (results["precision"], results["precision_requested"]) == ("bf16-amp", "bf16-amp")
    assert "bf16" in results["peak_flops"]["source"]  # MFU is read against the bfloat16 peak
    reader = tf.train.load_checkpoint(str(model_dir))
    dtypes = reader.get_variable_to_dtype_map()
    kernels_saved = [k for k in dtypes if "kernel" in k and "optimizer" not in k.lower() and "/m" not in k]
    assert kernels_saved and all(dtypes[k] == tf.float32 for k in kernels_saved), dtypes
