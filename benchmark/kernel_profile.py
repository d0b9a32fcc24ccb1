"""scripts/profile_kernels.py: a benchmark run with oneDNN's verbose log on, and the kernels of each
measured row's timed steps (benchmark.kernels) in kernels.md beside the benchmark's own outputs."""
import json
import os
import shlex
import subprocess
import sys

from acquisition.files import present
from benchmark import cli as benchmark_cli, kernels
from cluster.lifeline import held_lifeline
from pipeline.cli import run_command
from pipeline.errors import UsageError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCHMARK = os.path.join(ROOT, "scripts", "benchmark.py")
LOG_NAME = "onednn_verbose.log"
REPORT_NAME = "kernels.md"


def build_parser():
    """Returns the benchmark's parser, described as this tool."""
    parser = benchmark_cli.build_benchmark_parser()
    parser.prog = "profile_kernels.py"
    parser.description = (
        "Run scripts/benchmark.py with these flags and oneDNN's verbose log on (ONEDNN_VERBOSE=1), then write "
        "kernels.md beside its outputs: for each measured row, the oneDNN kernels of its timed steps (primitive, "
        "pass, implementation such as brgconv:avx512_core_amx, data type), their calls and milliseconds per step, "
        "their share of the step, and for convolutions, inner products and matmuls their FLOP/s against the peak "
        "of the type they compute in. Timing each kernel slows the steps a little: read shares, not images/sec. "
        "CPU only. " + parser.description)
    return parser


def _parse(parser, argv):
    """Returns (the benchmark's args, the argv to run it with); refuses what has no oneDNN kernels to show."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = benchmark_cli.parse_args(parser, argv)[0]  # the benchmark's own checks, exit 2
    if args.output not in argv:  # the default folder, named by the time: the benchmark writes into this one
        argv += ["--output", args.output]
    if args.gpus:
        parser.error("argument --gpus: oneDNN's log covers the CPU's kernels only; use --cpu-replicas")
    if args.input_only or args.target_accuracy is not None:
        parser.error("argument --input-only/--target-accuracy: the kernel profile reads training throughput rows; "
                     "leave them out")
    there = present(args.output, (REPORT_NAME, LOG_NAME))
    if there:
        parser.error(f"argument --output: {args.output} holds a {there[0]}, which would be overwritten; pass another "
                     "--output, or move it away")
    return args, argv


def _run_benchmark(argv, log_path):
    """Runs the benchmark with the verbose log on: its own lines to stdout, oneDNN's to `log_path`.
    Returns its exit code. The benchmark holds this process's lifeline: it ends if this one is killed."""
    with held_lifeline() as (env, lifeline), open(log_path, "w") as log, subprocess.Popen(
            [sys.executable, BENCHMARK, *argv], env=dict(env, PYTHONUNBUFFERED="1", **kernels.VERBOSE_ENVIRONMENT),
            pass_fds=(lifeline,), stdout=subprocess.PIPE, text=True) as child:
        try:
            for line in child.stdout:
                (log if line.startswith("onednn_verbose,") else sys.stdout).write(line)
        finally:
            if child.poll() is None:  # this tool was stopped: the benchmark goes too
                child.terminate()
    return child.returncode


def profile(parsed):
    """Runs the benchmark, writes kernels.md and prints it; returns the exit code."""
    from pipeline.machine import describe_cpu  # noqa: PLC0415
    from pipeline.peak import machine_peak  # noqa: PLC0415
    args, argv = parsed
    os.makedirs(args.output, exist_ok=True)
    log_path = os.path.join(args.output, LOG_NAME)
    code = _run_benchmark(argv, log_path)
    if code:
        return code  # the benchmark has said why, in one line
    with open(os.path.join(args.output, "results.json")) as f:
        rows = json.load(f)["rows"]
    with open(log_path) as log:
        executions = kernels.read_executions(log)
    if not executions:
        raise UsageError(f"oneDNN logged no kernel ({log_path} is empty): TensorFlow ran without oneDNN; "
                         "unset TF_ENABLE_ONEDNN_OPTS=0 and run on a CPU")
    peaks = {p: machine_peak(p, ["/cpu:0"]).flops for p in ("fp32", "bf16")}
    header = f"`profile_kernels.py {shlex.join(argv)}`; {describe_cpu()}"
    text = kernels.report(rows, executions, peaks, header)
    with open(os.path.join(args.output, REPORT_NAME), "w") as f:
        f.write(text)
    print(text)
    print(f"kernels: {os.path.abspath(os.path.join(args.output, REPORT_NAME))} (oneDNN's log: {log_path})")
    return 0


def main(argv=None):
    """Runs the command line; returns the exit code."""
    return run_command(build_parser(), profile, argv, parse=_parse)
