"""The machine's peak: the probe, its cache, the nominal CPU table and the GPU table."""
import json
import os

import pytest

from pipeline import peak

ZEN4 = {"vendor_id": "AuthenticAMD", "cpu family": "25", "model name": "AMD EPYC 9R14", "cpu MHz": "2500.000",
        "flags": "fpu avx2 fma avx512f avx512_bf16"}


def test_the_probe_returns_a_positive_figure_in_each_precision():
    for precision in ("fp32", "bf16"):
        flops, shape = peak.probe_peak(precision, budget_seconds=0.2)  # one shape timed once
        assert flops > 1e8 and shape.startswith(("gemm", "conv"))


def test_a_shape_whose_pilot_says_one_run_would_overrun_the_budget_is_left_out(monkeypatch):
    """float16 matmuls on a CPU without native float16 took 150 s a run against a 6 s budget: the probe
    of an --precision fp16 run took 2.5 minutes before its first step."""
    import tensorflow as tf
    built, piloted = [], []
    real_graph = peak._chained_graph

    def chained_graph(kind, shape, dtype, device, chain=peak.CHAIN):
        built.append((kind, shape, chain))
        return real_graph(kind, (2,) + tuple(shape[1:2]) + (8,) * (len(shape) - 2), dtype, device, chain)

    def seconds_per_run(kind, shape, dtype, device):
        piloted.append((kind, shape))
        return 1e6 if kind == "gemm" else 0.0
    monkeypatch.setattr(peak, "_chained_graph", chained_graph)
    monkeypatch.setattr(peak, "_seconds_per_run", seconds_per_run)
    figures = peak.probe_shapes("fp32", budget_seconds=1e3)
    assert [shape for shape, _ in figures] == [f"conv {'x'.join(map(str, s))}" for k, s in peak.PROBE_SHAPES
                                              if k == "conv"]
    assert not any(kind == "gemm" for kind, _, _ in built)  # no full run of a slow shape at all
    assert piloted == [(k, s) for k, s in peak.PROBE_SHAPES[1:]]  # the first shape is timed whatever it costs


def test_a_pilot_predicts_a_run_s_seconds_from_a_256th_of_its_flops(monkeypatch):
    import tensorflow as tf
    pilots = []
    real_graph = peak._chained_graph

    def chained_graph(kind, shape, dtype, device, chain=peak.CHAIN):
        pilots.append((shape, chain))
        return real_graph(kind, shape, dtype, device, chain)
    monkeypatch.setattr(peak, "_chained_graph", chained_graph)
    assert peak._seconds_per_run("gemm", (128, 64), tf.float32, "/cpu:0") > 0
    assert pilots == [((2, 64), 1)]
    assert peak._chained_graph_flops("gemm", (128, 64)) == 256 * peak._chained_graph_flops("gemm", (2, 64), chain=1)


def test_the_probe_runs_under_op_determinism():
    # The first --deterministic run in a precision not yet probed (train_fashion.py --deterministic
    # --precision bf16) probes with op determinism on, and an unseeded random op is an error there.
    import tensorflow as tf
    from tensorflow.python.framework import config as tf_config
    tf.config.experimental.enable_op_determinism()
    try:
        flops, _ = peak.probe_peak("fp32", budget_seconds=0.0)
    finally:
        tf_config.disable_op_determinism()
    assert flops > 1e8


@pytest.mark.parametrize("kind, shape", [("conv", (2, 8, 16)), ("gemm", (32, 16))])
def test_a_probe_run_times_the_math_and_not_the_making_of_its_inputs(kind, shape):
    import tensorflow as tf
    graph, _, op, flops = peak._chained_graph(kind, shape, tf.float32, "/cpu:0")
    timed = tf.compat.v1.graph_util.extract_sub_graph(graph.as_graph_def(), [op.op.name])
    op_types = {node.op for node in timed.node}
    assert not any(t.startswith("Random") for t in op_types)  # the inputs were made once, by the initializer
    assert ("Conv2D" if kind == "conv" else "MatMul") in op_types
    multiply_adds = 2 * 8 * 8 * 16 * 16 * 9 if kind == "conv" else 32 * 16 * 16
    assert flops == peak.CHAIN * 2 * multiply_adds


def test_the_cache_is_reused_only_on_the_same_cpu_name_and_core_count(tmp_path):
    path, probed = str(tmp_path / "peak.json"), []

    def fake_probe(precision, device):
        probed.append(precision)
        return 1e11 * len(probed), "gemm 8x8"

    first = peak.measured_peak("fp32", "CPU A", 2, path=path, probe_fn=fake_probe)
    assert first[0] == 1e11 and "probed now" in first[1]
    again = peak.measured_peak("fp32", "CPU A", 2, path=path, probe_fn=fake_probe)
    assert again[0] == 1e11 and "cached in" in again[1] and len(probed) == 1
    assert peak.measured_peak("fp32", "CPU A", 4, path=path, probe_fn=fake_probe)[0] == 2e11
    assert peak.measured_peak("fp32", "CPU B", 2, path=path, probe_fn=fake_probe)[0] == 3e11
    assert peak.measured_peak("bf16", "CPU A", 2, path=path, probe_fn=fake_probe)[0] == 4e11
    cache = json.load(open(path))
    assert cache[peak.machine_key("CPU A", 2)]["fp32"]["flops"] == 1e11  # kept beside the later bf16 figure
    assert peak.measured_peak("fp16", "CPU A", 2, path=path, probe=False, probe_fn=fake_probe)[0] is None
    assert len(probed) == 4


def test_a_new_probe_never_lowers_the_cached_figure(tmp_path, monkeypatch):
    path = str(tmp_path / "peak.json")
    key = peak.machine_key("CPU A", 2)
    json.dump({key: {"fp32": {"flops": 5e11, "shape": "conv 1x1x1", "probed_at": "then"}}}, open(path, "w"))
    original = peak._read_cache
    reads = []

    def read_without_fp32_first(p):  # as if another run cached its figure while this one probed
        reads.append(p)
        return {} if len(reads) == 1 else original(p)

    monkeypatch.setattr(peak, "_read_cache", read_without_fp32_first)
    flops, _ = peak.measured_peak("fp32", "CPU A", 2, path=path, probe_fn=lambda *_: (1e11, "gemm 8x8"))
    assert flops == 5e11 and json.load(open(path))[key]["fp32"]["flops"] == 5e11


def test_a_figure_that_cannot_be_cached_is_not_said_to_be(tmp_path):
    home = tmp_path / "read-only"
    home.mkdir()
    home.chmod(0o555)
    path = str(home / ".cache" / "peak.json")
    try:
        if os.access(home, os.W_OK):  # root passes permission checks: a file where the folder should be
            home.chmod(0o755)
            (home / ".cache").write_text("")
        flops, detail = peak.measured_peak("fp32", "CPU A", 2, path=path, probe_fn=lambda *_: (1e11, "gemm 8x8"))
    finally:
        home.chmod(0o755)
    assert flops == 1e11 and "cached in" not in detail
    assert detail.startswith(f"best shape gemm 8x8, probed now, not cached ({path}: ") and peak.PEAK_CACHE_ENV in detail


def test_the_cache_path_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(peak.PEAK_CACHE_ENV, str(tmp_path / "x.json"))
    assert peak.cache_path() == str(tmp_path / "x.json")


def test_the_nominal_cpu_peak_is_cores_times_flops_per_cycle_times_the_clock():
    flops, described = peak.nominal_cpu_peak("fp32", ZEN4, cores=2)
    assert flops == pytest.approx(2 * 32 * 2.5e9) and "AMD Zen 4" in described
    assert peak.nominal_cpu_peak("bf16", ZEN4, cores=2)[0] == pytest.approx(2 * 64 * 2.5e9)
    assert peak.nominal_cpu_peak("fp16", ZEN4, cores=2)[0] is None
    unknown = dict(ZEN4, vendor_id="SomeoneElse")
    assert peak.nominal_cpu_peak("fp32", unknown, cores=2) == (None, "unknown (CPU family not in the table)")
    assert peak.nominal_cpu_peak("fp32", {k: v for k, v in ZEN4.items() if k != "cpu MHz"})[0] is None


@pytest.mark.parametrize("name, precision, tflops", [
    ("NVIDIA H100 80GB HBM3", "bf16", 989.4), ("NVIDIA H100 80GB HBM3", "fp32", 494.7),
    ("NVIDIA H100 PCIe", "fp16", 756.0), ("NVIDIA A100-SXM4-40GB", "bf16", 312.0),
    ("NVIDIA A100 80GB PCIe", "fp32", 156.0), ("Tesla V100-SXM2-16GB", "fp16", 125.0),
    ("Tesla V100-PCIE-32GB", "fp32", 14.0), ("NVIDIA L4", "bf16", 121.0),
    ("Tesla V100-SXM2-16GB", "bf16", None), ("NVIDIA L40S", "fp32", None), ("NVIDIA GeForce RTX 3090", "fp16", None),
])
def test_the_gpu_table_gives_the_dense_peak_by_device_name(name, precision, tflops):
    assert peak.gpu_table_peak(name, precision) == (tflops * 1e12 if tflops else None)


def test_a_run_on_gpus_is_read_against_the_table_times_the_gpus(tmp_path, monkeypatch):
    monkeypatch.setenv(peak.PEAK_CACHE_ENV, str(tmp_path / "peak.json"))
    found = peak.machine_peak("bf16", ["/gpu:0", "/gpu:1"], ["NVIDIA A100-SXM4-40GB"] * 2, probe=False)
    assert found.flops == 2 * 312e12 and "datasheet" in found.source and found.nominal is None
    unknown = peak.machine_peak("bf16", ["/gpu:0"], ["Tesla T4"], probe=False)
    assert unknown.flops is None and "not in the table" in unknown.nominal_source


def test_a_probe_that_fails_leaves_the_peak_unknown_and_caches_nothing(tmp_path):
    import tensorflow as tf

    def failing_probe(precision, device):
        raise tf.errors.InvalidArgumentError(None, None, "No OpKernel was registered\nmore")

    path = str(tmp_path / "peak.json")
    flops, detail = peak.measured_peak("fp16", "CPU A", 2, path=path, probe_fn=failing_probe)
    assert flops is None and "probe failed" in detail and not (tmp_path / "peak.json").exists()


def test_cpus_of_one_name_but_another_generation_do_not_share_a_cached_peak():
    zen5 = dict(ZEN4, **{"cpu family": "26", "model": "2"})
    assert peak.cpu_identity(ZEN4) != peak.cpu_identity(zen5)
    assert peak.cpu_identity(zen5) == "AMD EPYC 9R14 (family 26, model 2; avx2 fma avx512f avx512_bf16)"
    assert peak.cpu_identity(dict(zen5, flags="fpu avx2 fma")) != peak.cpu_identity(zen5)
