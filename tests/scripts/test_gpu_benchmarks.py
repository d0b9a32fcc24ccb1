"""scripts/gpu_benchmarks.sh: refused in one line where TensorFlow sees no GPU; on GPUs it sweeps the mixed
precisions they compute natively (bf16 from compute capability 8.0, fp16 from 7.0), and every command it would
run is one the benchmark accepts."""
import os
import shlex
import subprocess

import pytest

from benchmark import cli as benchmark_cli
from tests.conftest import ROOT, assert_clean_failure

SCRIPT = os.path.join(ROOT, "scripts", "gpu_benchmarks.sh")


def run_script(devices, *argv):
    return subprocess.run([SCRIPT, *argv], env=dict(os.environ, GPU_BENCHMARKS_DEVICES=devices),
                          capture_output=True, text=True, timeout=60)


def test_no_gpu_is_refused_in_one_line():
    refused = run_script("0 0.0")
    assert refused.returncode == 1
    assert assert_clean_failure(refused, "TensorFlow sees no GPU here") == refused.stderr.strip()


@pytest.mark.parametrize("devices, precisions", [("4 8.0 NVIDIA A100-SXM4-40GB", {"fp32", "bf16", "fp16"}),
                                                 ("2 7.0 Tesla V100-SXM2-16GB", {"fp32", "fp16"}),
                                                 ("1 6.1 NVIDIA GeForce GTX 1080", {"fp32"})])
def test_the_sweeps_take_the_precisions_the_gpus_compute_and_every_command_is_accepted(tmp_path, monkeypatch,
                                                                                        devices, precisions):
    # bf16 was swept on every GPU, older than compute capability 8.0 too, where it is emulated.
    listed = run_script(devices, "--dry-run")
    assert listed.returncode == 0, listed.stderr
    count, name = int(devices.split()[0]), devices.split(maxsplit=2)[2]
    assert f"{count} x {name}" in listed.stderr  # the GPUs named for the summaries
    commands = [shlex.split(line) for line in listed.stdout.splitlines()]
    assert len(commands) == 5
    monkeypatch.setattr(os, "environ", dict(os.environ))  # parsing sets TensorFlow's environment
    swept = set()
    for argv in commands:
        flags = argv[argv.index("scripts/benchmark.py") + 1:]
        output = flags[flags.index("--output") + 1]
        assert output.startswith("docs/benchmarks/") and "-gpu" in output
        flags[flags.index("--output") + 1] = str(tmp_path / os.path.basename(output))
        args, task, task_args, _ = benchmark_cli.parse_args(benchmark_cli.build_benchmark_parser(), flags)
        assert max(args.gpus) == (1 if args.tiny_model else count)
        swept |= set(args.precision)
    assert swept == precisions
