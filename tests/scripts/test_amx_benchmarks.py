"""scripts/amx_benchmarks.sh: refused in one line on a CPU without AMX or where a measurement is recorded
already, and on one with AMX every command it would run is one the benchmark, the kernel profiler and
the peak probe accept."""
import os
import shlex
import shutil
import subprocess

import pytest

from benchmark import cli as benchmark_cli
from benchmark.kernel_profile import build_parser as kernel_parser
from scripts.probe_peak import build_parser as probe_parser
from tests.conftest import ROOT, assert_clean_failure, write_cpuinfo

SCRIPT = os.path.join(ROOT, "scripts", "amx_benchmarks.sh")


def run_script(cpuinfo, *argv):
    return subprocess.run([SCRIPT, *argv], env=dict(os.environ, AMX_BENCHMARKS_CPUINFO=cpuinfo),
                          capture_output=True, text=True, timeout=60)


def docs_state():
    benchmarks = os.path.join(ROOT, "docs", "benchmarks")
    return os.path.getsize(os.path.join(ROOT, "docs", "benchmarks.md")), sorted(os.listdir(benchmarks))


@pytest.mark.parametrize("flags", ["avx512f avx512_bf16", ""])
def test_a_cpu_without_amx_is_refused_in_one_line_and_nothing_is_written(tmp_path, flags):
    before = docs_state()
    refused = run_script(write_cpuinfo(tmp_path, flags))
    assert refused.returncode == 1
    assert assert_clean_failure(refused, "no amx_bf16 (Test CPU)", "Xeon with AMX") == refused.stderr.strip()
    assert docs_state() == before


def test_an_unknown_argument_is_a_flag_error(tmp_path):
    refused = run_script(write_cpuinfo(tmp_path, "amx_tile amx_bf16"), "--repeats")
    assert refused.returncode == 2
    assert_clean_failure(refused, "unknown argument --repeats")


def test_an_unknown_measurement_for_only_is_a_flag_error(tmp_path):
    before = docs_state()
    refused = run_script(write_cpuinfo(tmp_path, "amx_tile amx_bf16"), "--only", "amx-peak,amx-engines-oct46")
    assert refused.returncode == 2
    assert_clean_failure(refused, "--only amx-engines-oct46: no such measurement", "--dry-run")
    assert docs_state() == before


def test_every_command_on_an_amx_cpu_is_accepted_by_the_tool_it_runs(tmp_path, monkeypatch):
    before = docs_state()
    listed = run_script(write_cpuinfo(tmp_path, "avx512f avx512_bf16 amx_tile amx_bf16"), "--dry-run")
    assert listed.returncode == 0, listed.stderr
    assert "Test CPU" in listed.stderr and "amx_tile amx_bf16" in listed.stderr  # the CPU named for the summaries
    assert docs_state() == before  # a dry run measures and writes nothing
    commands = [shlex.split(line) for line in listed.stdout.splitlines()]
    monkeypatch.setattr(os, "environ", dict(os.environ))  # --xla's parse sets TensorFlow's environment
    outputs, tools = [], []
    for argv in commands:
        if argv[0].endswith("ab.sh"):  # OUT PAIRS, then the benchmark's flags, run with --conv-gradients each way
            tool, output, flags = argv[0], argv[1], argv[3:] + ["--conv-gradients", "matmul", "--output", argv[1]]
            assert os.path.exists(os.path.join(ROOT, tool)) and int(argv[2]) >= 2
        else:
            environment = [word for word in argv if "=" in word and argv.index(word) < argv.index("python")]
            assert all(word.startswith(("TF_SET_ONEDNN_FPMATH_MODE=", "PYTHONPATH=")) for word in environment), argv
            tool, flags = argv[argv.index("python") + 1], argv[argv.index("python") + 2:]
        tools.append(os.path.basename(tool))
        if tool.endswith("probe_peak.py"):
            assert set(probe_parser().parse_args(flags).precision) == {"fp32", "bf16"}
            continue
        if tool.endswith("measure.py"):
            assert os.path.exists(os.path.join(ROOT, tool))
            continue
        assert "--output" in flags, argv
        output = flags[flags.index("--output") + 1]
        assert output.startswith("docs/benchmarks/amx-")
        outputs.append(output)
        flags[flags.index("--output") + 1] = str(tmp_path / os.path.basename(output))  # parsing makes the folder
        parser = kernel_parser() if tool.endswith("profile_kernels.py") else benchmark_cli.build_benchmark_parser()
        args, task, task_args, _ = benchmark_cli.parse_args(parser, flags)
        assert args.cpu_replicas == [1] and args.data == ["synthetic"] and task_args.synthetic
        assert task.name in ("fashion", "oct")
    assert len(set(outputs)) == len(outputs)  # no measurement refused for another's folder
    assert {"probe_peak.py", "profile_kernels.py", "benchmark.py", "measure.py", "ab.sh"} == set(tools)


def test_a_recorded_measurement_is_refused_before_anything_runs(tmp_path):
    """A copy of the script in a tree of its own (no scripts/in_venv.sh there: were a refusal missed, nothing
    could be measured), where the kernel profile of the Fashion CNN is recorded already."""
    tree = tmp_path / "tree"
    (tree / "scripts").mkdir(parents=True)
    shutil.copy(SCRIPT, tree / "scripts")
    (tree / "docs" / "benchmarks" / "amx-kernels-fashion").mkdir(parents=True)
    (tree / "docs" / "benchmarks.md").write_text("# Benchmarks\n")
    refused = subprocess.run([str(tree / "scripts" / "amx_benchmarks.sh"), "--only", "amx-peak,amx-kernels-fashion"],
                             env=dict(os.environ, AMX_BENCHMARKS_CPUINFO=write_cpuinfo(tmp_path, "amx_tile amx_bf16")),
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode == 1
    assert_clean_failure(refused, "docs/benchmarks/amx-kernels-fashion holds a recorded measurement", "--only")
    assert (tree / "docs" / "benchmarks.md").read_text() == "# Benchmarks\n"
    assert sorted(os.listdir(tree / "docs" / "benchmarks")) == ["amx-kernels-fashion"]  # no amx-peak.txt
