"""scripts/profile_kernels.py: oneDNN's verbose lines read into kernels per timed step, their FLOPs
against hand counts, and a real benchmark run whose log is cut to its timed steps."""
import json
import os
import subprocess
import sys

import pytest

from benchmark.kernels import EIGEN_NOTE, parse_execution, problem_flops, read_executions, report, step_kernels
from tests.conftest import ROOT, assert_ends

# Lines as TensorFlow 2.15's oneDNN 3.2 prints them with ONEDNN_VERBOSE=1 ONEDNN_VERBOSE_TIMESTAMP=1.
CONV = ("onednn_verbose,1795535056934.937012,exec,cpu,convolution,brgconv:avx512_core_bf16,forward_training,"
        "src_bf16::blocked:acdb::f0 wei_bf16:a:blocked:AcdB64a2b::f0 bia_bf16:a:blocked:a::f0 "
        "dst_bf16::blocked:acdb::f0,attr-scratchpad:user attr-post-ops:eltwise_relu ,alg:convolution_direct,"
        "mb64_ic32oc64_ih13oh11kh3sh1dh0ph0_iw13ow11kw3sw1dw0pw0,3.7981")
REORDER = ("onednn_verbose,1795535056929.781006,exec,cpu,reorder,jit:uni,undef,src_f32::blocked:cdba::f0 "
           "dst_bf16:p:blocked:AcdB16a2b::f0,,,32x1x3x3,0.0371094")
FPMATH_CONV = ("onednn_verbose,1795535056935.0,exec,cpu,convolution,brgconv:avx512_core_amx,backward_data,"
               "src_f32::blocked:acdb::f0 wei_f32::blocked:AcdB64a::f0 dst_f32::blocked:acdb::f0,"
               "attr-fpmath:bf16 attr-scratchpad:user ,alg:convolution_direct,"
               "mb64_ic32oc64_ih13oh11kh3sh1dh0ph0_iw13ow11kw3sw1dw0pw0,1.5")
GEMM = ("onednn_verbose,1795535057000.545898,exec,cpu,gemm_api,,undef,src_f32::blocked:ab:f0 "
        "wei_f32::blocked:ba:f0 dst_f32::blocked:ab:f0,,,64x10:10x64,0.0090332")


def test_an_exec_line_is_read_field_by_field():
    conv = parse_execution(CONV)
    assert (conv.unix_ms, conv.primitive, conv.implementation, conv.propagation, conv.types, conv.fpmath,
            conv.ms) == (1795535056934.937012, "convolution", "brgconv:avx512_core_bf16", "forward_training",
                         "bf16", "", 3.7981)
    assert parse_execution(REORDER).types == "f32->bf16"  # a converting reorder says so
    assert parse_execution(FPMATH_CONV).fpmath == "bf16"
    gemm = parse_execution(GEMM)
    assert (gemm.implementation, gemm.problem) == ("-", "64x10:10x64")
    for other in ("onednn_verbose,info,oneDNN v3.2.1 (commit N/A)",
                  CONV.replace(",1795535056934.937012,", ","),  # no timestamp: not this tool's log
                  "benchmark: fashion, training ...", CONV.rsplit(",", 1)[0] + ",slow"):
        assert parse_execution(other) is None
    assert len(read_executions([CONV, "noise\n", GEMM + "\n"])) == 2


def test_flops_match_hand_counts():
    assert problem_flops("convolution", "mb64_ic32oc64_ih13oh11kh3sh1dh0ph0_iw13ow11kw3sw1dw0pw0") == \
        2 * 64 * 64 * 11 * 11 * 32 * 3 * 3
    # groups: each output sees ic / g input channels
    assert problem_flops("convolution", "mb2_g4ic8oc8_ih5oh5kh3sh1dh0ph1_iw5ow5kw3sw1dw0pw1") == 2 * 2 * 8 * 25 * 2 * 9
    assert problem_flops("convolution", "mb1_ic2oc3_id4od2kd3sd1dd0pd0_ih4oh2kh3sh1dh0ph0_iw4ow2kw3sw1dw0pw0") == \
        2 * 3 * 8 * 2 * 27
    assert problem_flops("inner_product", "mb64ic576oc64") == 2 * 64 * 576 * 64
    assert problem_flops("inner_product", "mb8ic64ih5iw5oc10") == 2 * 8 * 64 * 25 * 10
    assert problem_flops("matmul", "576x64:64x64") == 2 * 576 * 64 * 64
    assert problem_flops("matmul", "2x3x4:2x4x5") == 2 * 2 * 3 * 4 * 5
    assert problem_flops("gemm_api", "64x10:10x64") == 2 * 64 * 10 * 64
    assert problem_flops("pooling", "mb64ic32_ih26oh13kh2sh2dh0ph0_iw26ow13kw2sw2dw0pw0") is None


def test_kernels_are_counted_per_step_inside_the_span_and_read_against_their_types_peak():
    def line(ms_since, primitive_line, ms):
        fields = primitive_line.split(",")
        fields[1], fields[-1] = f"{1_000_000 + ms_since:.3f}", str(ms)
        return ",".join(fields)
    executions = read_executions([line(-5, CONV, 100.0),  # a warm-up step: outside
                                  line(1, CONV, 2.0), line(3, CONV, 4.0), line(4, FPMATH_CONV, 1.0),
                                  line(5, REORDER, 0.5), line(20, CONV, 100.0)])  # after the span
    kernels = step_kernels(executions, (1000.0, 1000.010), steps=2, peaks={"fp32": 1e11, "bf16": 1e12})
    by_kind = {(k.implementation, k.types): k for k in kernels}
    assert [k.ms_per_step for k in kernels] == [3.0, 0.5, 0.25]  # longest first
    conv = by_kind["brgconv:avx512_core_bf16", "bf16"]
    flops = 2 * 64 * 64 * 11 * 11 * 32 * 9
    assert conv.calls_per_step == 1 and conv.flops_per_step == flops
    assert conv.fraction_of_peak == pytest.approx(flops / 0.003 / 1e12)
    assert conv.ms_at_peak == pytest.approx(1000 * flops / 1e12)
    # an f32 kernel allowed to compute in bf16 is read against the bf16 peak
    assert by_kind["brgconv:avx512_core_amx", "f32"].peak == 1e12
    reorder = by_kind["jit:uni", "f32->bf16"]
    assert reorder.flops_per_second is None and reorder.fraction_of_peak is None


def test_layers_are_kernels_split_by_problem_shape_with_only_those_that_compute():
    first_layer = CONV.replace("mb64_ic32oc64_ih13oh11", "mb64_ic1oc32_ih28oh26").replace("iw13ow11", "iw28ow26")
    executions = read_executions([CONV.replace(",3.7981", ",4.0"), first_layer.replace(",3.7981", ",1.0"),
                                  CONV.replace(",3.7981", ",2.0"), REORDER])
    span, peaks = (0, 2e12), {"bf16": 1e12}
    layers = step_kernels(executions, span, steps=1, peaks=peaks, by_layer=True)
    assert [(k.problem.split("_")[1], k.calls_per_step, k.ms_per_step) for k in layers] == \
        [("ic32oc64", 2, 6.0), ("ic1oc32", 1, 1.0)]  # the reorder computes nothing: not a layer
    assert layers[1].flops_per_step == 2 * 64 * 32 * 26 * 26 * 1 * 9
    # the layers add up to the kernels they split
    kernel = step_kernels(executions, span, steps=1, peaks=peaks)[0]
    assert (kernel.problem, kernel.ms_per_step, kernel.flops_per_step) == \
        ("", 7.0, sum(k.flops_per_step for k in layers))


def test_a_log_without_a_convolution_says_tensorflow_ran_its_eigen_kernels():
    row = {"engine": "estimator", "precision": "fp32", "global_batch_size": 64, "timed_steps": 1,
           "span_unix_start": 1795535056.0, "span_unix_end": 1795535058.0, "step_time_mean": 0.01,
           "images_per_sec_span": 100.0}
    eigen = report([row], read_executions([GEMM]), {"fp32": 1e11}, "header")
    assert EIGEN_NOTE in eigen and "TF_ENABLE_ONEDNN_OPTS=0" in eigen
    assert EIGEN_NOTE not in report([row], read_executions([GEMM, CONV]), {"fp32": 1e11, "bf16": 1e11}, "header")


def test_the_command_lines_turn_on_tensorflow_s_onednn_kernels_unless_told_otherwise(monkeypatch):
    import argparse
    from pipeline.cli import set_tensorflow_environment
    monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS", raising=False)
    set_tensorflow_environment(argparse.Namespace())
    assert os.environ["TF_ENABLE_ONEDNN_OPTS"] == "1"
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "0")  # a user's choice stays
    set_tensorflow_environment(argparse.Namespace())
    assert os.environ["TF_ENABLE_ONEDNN_OPTS"] == "0"


def test_a_real_benchmark_run_is_cut_to_its_timed_steps(tmp_path):
    out = tmp_path / "profile"
    batch, timed = 16, 3
    done = subprocess.run(
        [sys.executable, os.path.join(ROOT, "scripts", "profile_kernels.py"), "--task", "fashion", "--synthetic",
         "--data", "synthetic", "--cpu-replicas", "1", "--engines", "estimator", "--batch-size", str(batch),
         "--repeats", "1", "--warm-up-steps", "2", "--timed-steps", str(timed), "--output", str(out)],
        capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "onednn_verbose," not in done.stdout and "### estimator, fp32, batch 16" in done.stdout
    text = (out / "kernels.md").read_text()
    assert text in done.stdout
    # the layer table names each of the three convolutions' shapes
    for shape in ("mb16_ic1oc32_ih28oh26", "mb16_ic32oc64_ih13oh11", "mb16_ic64oc64_ih5oh3"):
        assert f"| convolution | backward_weights | `{shape}" in text
    row = json.loads((out / "results.json").read_text())["rows"][0]
    with open(out / "onednn_verbose.log") as log:
        executions = read_executions(log)
    kernels = step_kernels(executions, (row["span_unix_start"], row["span_unix_end"]), timed, {})
    convolutions = {}
    for k in kernels:
        if k.primitive == "convolution":
            convolutions[k.propagation] = convolutions.get(k.propagation, 0) + k.calls_per_step
    # three convolutions; the first one's input (the image) gets no gradient
    assert convolutions == {"forward_training": 3, "backward_weights": 3, "backward_data": 2}
    forward = sum(k.flops_per_step for k in kernels
                  if k.primitive == "convolution" and k.propagation == "forward_training")
    assert forward == 2 * batch * (26 * 26 * 32 * 1 * 9 + 11 * 11 * 64 * 32 * 9 + 3 * 3 * 64 * 64 * 9)
    # the warm-up steps (and the graph's first runs) were logged too, and left out
    all_forward = sum(1 for e in executions if e.primitive == "convolution" and e.propagation == "forward_training")
    assert all_forward >= 3 * (timed + 2)


def test_the_benchmark_ends_when_the_profiler_is_killed(tmp_path):
    profiler = subprocess.Popen(
        [sys.executable, os.path.join(ROOT, "scripts", "profile_kernels.py"), "--task", "fashion", "--synthetic",
         "--data", "synthetic", "--cpu-replicas", "1", "--engines", "estimator", "--batch-size", "8", "--repeats",
         "1", "--timed-steps", "1000000", "--output", str(tmp_path / "profile")],  # never ends by itself
        stdout=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        assert "benchmark: fashion" in profiler.stdout.readline()  # the benchmark runs, under the profiler
        with open(f"/proc/{profiler.pid}/task/{profiler.pid}/children") as f:
            benchmark = int(f.read().split()[0])
    finally:
        profiler.kill()
        profiler.wait(timeout=30)
    assert_ends(benchmark, 30, "the benchmark outlived the profiler that started it")


@pytest.mark.parametrize("name", ["kernels.md", "onednn_verbose.log"])
def test_an_output_holding_a_kernel_report_or_log_is_refused_before_any_run(tmp_path, capsys, name):
    """A user's kernels.md (or log) in --output was overwritten."""
    from benchmark.kernel_profile import _parse, build_parser
    (tmp_path / name).write_text("mine")
    with pytest.raises(SystemExit) as exit_info:
        _parse(build_parser(), ["--task", "fashion", "--synthetic", "--output", str(tmp_path)])
    assert exit_info.value.code == 2
    assert f"{tmp_path} holds a {name}, which would be overwritten" in capsys.readouterr().err
    assert os.listdir(tmp_path) == [name]
