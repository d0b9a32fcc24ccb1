"""oneDNN's own account of a benchmark's timed steps: which kernels ran, how long, how near the peak.

With ONEDNN_VERBOSE=1 and ONEDNN_VERBOSE_TIMESTAMP=1, oneDNN prints a line for every primitive it
executes: when (milliseconds since the epoch), what (convolution, inner_product, matmul, pooling,
reorder, ...), which implementation (`brgconv:avx512_core_amx`, `jit:uni`, ...), the pass
(forward_training, backward_data, backward_weights), the memory descriptors (data types and
layouts), the attributes (`attr-fpmath:bf16`, post-ops), the problem's shape and its milliseconds.
The lines whose timestamps fall inside a benchmark row's timed span (`span_unix_start`,
`span_unix_end`) are that row's steps. Timing each primitive makes oneDNN wait for it, so the
steps run somewhat slower than without the log: shares of the step are the figures to read.
"""
import collections
import dataclasses
import math
import re
from typing import Optional

VERBOSE_ENVIRONMENT = {"ONEDNN_VERBOSE": "1", "ONEDNN_VERBOSE_TIMESTAMP": "1"}
# A log without a convolution primitive: TensorFlow's own (Eigen) kernels ran, calling oneDNN's gemm alone.
EIGEN_NOTE = ("**No oneDNN convolution ran**: TensorFlow computed the convolutions with its own Eigen kernels, which "
              "call oneDNN's gemm (the `gemm_api` rows), because TF_ENABLE_ONEDNN_OPTS=0 was set (the project sets 1 "
              "unless it is given; TensorFlow 2.15's own default on CPUs without AVX-512 is 0).")
_SHAPE_FIELD = re.compile(r"([a-z]+)(\d+)")


@dataclasses.dataclass(frozen=True)
class Execution:
    """One primitive execution from an `onednn_verbose,<ms>,exec,cpu,...` line."""
    unix_ms: float
    primitive: str
    implementation: str
    propagation: str
    types: str  # the source's data type, or 'f32->bf16' for a reorder that converts
    fpmath: str  # the attribute that lets f32 primitives compute in a narrower type ('' when strict)
    problem: str
    ms: float


def _data_type(descriptor):
    """Returns the data type of one memory descriptor, e.g. 'src_bf16::blocked:acdb::f0' -> 'bf16'."""
    return descriptor.split(":", 1)[0].split("_", 1)[-1]


def parse_execution(line):
    """Returns the Execution of an exec line with a timestamp, or None for any other line."""
    fields = line.rstrip("\n").split(",")
    if len(fields) < 11 or fields[0] != "onednn_verbose" or fields[2] != "exec":
        return None
    try:
        unix_ms, ms = float(fields[1]), float(fields[-1])
    except ValueError:
        return None
    primitive, implementation, propagation, descriptors, attributes = fields[4:9]
    types = [_data_type(d) for d in descriptors.split()]
    if primitive == "reorder" and len(types) == 2 and types[0] != types[1]:
        kind = f"{types[0]}->{types[1]}"
    else:
        kind = types[0] if types else ""
    fpmath = next((a.split(":", 1)[1] for a in attributes.split() if a.startswith("attr-fpmath:")), "")
    return Execution(unix_ms, primitive, implementation or "-", propagation, kind, fpmath, fields[-2], ms)


def read_executions(lines):
    """Returns the Executions among `lines` of a log (other lines are skipped)."""
    return [e for e in map(parse_execution, lines) if e is not None]


def problem_flops(primitive, problem):
    """Returns the FLOPs (2 per multiply-add) of a convolution, inner product or matmul of that
    verbose problem description, the same for every pass; None for other primitives."""
    if primitive in ("matmul", "gemm_api"):
        left, right = problem.split(":")[:2]
        left, right = [int(v) for v in left.split("x")], [int(v) for v in right.split("x")]
        return 2 * math.prod(left[:-2] or [1]) * left[-2] * left[-1] * right[-1]
    if primitive not in ("convolution", "inner_product"):
        return None
    sizes = {key: int(value) for key, value in _SHAPE_FIELD.findall(problem)}
    spatial_in = sizes.get("id", 1) * sizes.get("ih", 1) * sizes.get("iw", 1)
    if primitive == "inner_product":
        return 2 * sizes["mb"] * sizes["ic"] * spatial_in * sizes["oc"]
    outputs = sizes["mb"] * sizes["oc"] * sizes.get("od", 1) * sizes.get("oh", 1) * sizes.get("ow", 1)
    window = sizes.get("kd", 1) * sizes.get("kh", 1) * sizes.get("kw", 1)
    return 2 * outputs * sizes["ic"] // sizes.get("g", 1) * window


@dataclasses.dataclass(frozen=True)
class KernelFigures:
    """One kernel's share of a timed step: a primitive, pass, implementation and data type."""
    primitive: str
    propagation: str
    implementation: str
    types: str
    calls_per_step: float
    ms_per_step: float
    flops_per_step: Optional[float]
    peak: Optional[float]  # FLOP/s of the type it computes in
    problem: str = ""  # the problem's shape, when the kernel is one layer's

    @property
    def flops_per_second(self):
        """Returns the kernel's FLOP/s while it runs, or None for a kernel with no FLOP count."""
        return self.flops_per_step / (self.ms_per_step / 1000) if self.flops_per_step and self.ms_per_step else None

    @property
    def fraction_of_peak(self):
        """Returns its FLOP/s over the peak of its type, or None."""
        return self.flops_per_second / self.peak if self.flops_per_second and self.peak else None

    @property
    def ms_at_peak(self):
        """Returns the milliseconds a step would spend in it at the peak, or None."""
        return 1000 * self.flops_per_step / self.peak if self.flops_per_step and self.peak else None


def compute_type(execution):
    """Returns the precision an execution computes in: 'bf16' for bf16 data or an f32 primitive
    allowed to compute in bf16 (fpmath), else 'fp32'."""
    return "bf16" if execution.types == "bf16" or execution.fpmath in ("bf16", "any") else "fp32"


def step_kernels(executions, span_unix, steps, peaks, by_layer=False):
    """Returns the KernelFigures of the executions inside `span_unix` (seconds since the epoch),
    per step over `steps`, the longest first; `peaks` maps 'fp32'/'bf16' to FLOP/s (or None).
    By layer: only the kernels with a FLOP count, one per problem shape as well."""
    start_ms, end_ms = 1000 * span_unix[0], 1000 * span_unix[1]
    groups = collections.defaultdict(list)
    for e in executions:
        if start_ms <= e.unix_ms <= end_ms and (not by_layer or problem_flops(e.primitive, e.problem)):
            problem = e.problem if by_layer else ""
            groups[(e.primitive, e.propagation, e.implementation, e.types, compute_type(e), problem)].append(e)
    kernels = []
    for (primitive, propagation, implementation, types, computes, problem), members in groups.items():
        flops = [problem_flops(e.primitive, e.problem) for e in members]
        kernels.append(KernelFigures(
            primitive, propagation, implementation, types, len(members) / steps, sum(e.ms for e in members) / steps,
            sum(flops) / steps if None not in flops else None, peaks.get(computes), problem))
    return sorted(kernels, key=lambda k: -k.ms_per_step)


def _number(value, digits=2):
    return "" if value is None else f"{value:,.{digits}f}"


def _figures(k, step_ms):
    """Returns the table cells every kernel has: calls, time, share, FLOP/s and how near the peak."""
    gflops = k.flops_per_second / 1e9 if k.flops_per_second else None
    return (f"{k.calls_per_step:g} | {k.ms_per_step:.3f} | {100 * k.ms_per_step / step_ms:.1f}% | "
            f"{_number(gflops, 1)} | {_number(k.fraction_of_peak)} | {_number(k.ms_at_peak, 3)} |")


def row_report(row, kernels, layers):
    """Returns the markdown lines of one benchmark row's kernels: a table of kernels, what they add up
    to, and a table of the `layers` (the same kernels with a FLOP count, one per problem shape)."""
    step_ms = 1000 * row["global_batch_size"] / row["images_per_sec_span"]
    in_onednn = sum(k.ms_per_step for k in kernels)
    counted = [k for k in kernels if k.ms_at_peak is not None]
    at_peak = sum(k.ms_at_peak for k in counted)
    lines = [f"### {row['engine']}, {row['precision']}, batch {row['global_batch_size']} "
             f"({row['images_per_sec_span']:,.1f} images/sec with the log on)", "",
             f"A step: {step_ms:.2f} ms. oneDNN's kernels: {in_onednn:.2f} ms a step in all "
             f"({100 * in_onednn / step_ms:.0f}% of the step; above 100% where TensorFlow runs independent ops at "
             f"once), {sum(k.ms_per_step for k in counted):.2f} ms of it in convolutions, inner products and "
             f"matmuls, whose FLOPs would take {at_peak:.2f} ms at the peak: {at_peak / step_ms:.2f} of the peak "
             f"over the whole step (the MFU by oneDNN's own count of what it computed).", "",
             "| primitive | pass | implementation | type | calls/step | ms/step | share of step | GFLOP/s | "
             "of peak | ms at peak |", "|---|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {k.primitive} | {k.propagation} | {k.implementation} | {k.types} | {_figures(k, step_ms)}"
              for k in kernels]
    lines += ["", "Layer by layer (each problem shape a pass computes: layers of one shape share a row, "
              "their calls counted; the longest first):", "",
              "| primitive | pass | problem | implementation | type | calls/step | ms/step | share of step | "
              "GFLOP/s | of peak | ms at peak |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {k.primitive} | {k.propagation} | `{k.problem}` | {k.implementation} | {k.types} | "
              f"{_figures(k, step_ms)}" for k in layers]
    return lines


def report(rows, executions, peaks, header):
    """Returns the markdown report of every benchmark row: its kernels per timed step."""
    lines = ["# oneDNN kernels per timed step", "", header, "",
             "Peaks read against: " + ", ".join(f"{p} {v / 1e9:,.0f} GFLOP/s" if v else f"{p} unknown"
                                                for p, v in sorted(peaks.items())), ""]
    if not any(e.primitive == "convolution" for e in executions):
        lines += [EIGEN_NOTE, ""]
    for row in rows:
        span, steps = (row["span_unix_start"], row["span_unix_end"]), row["timed_steps"]
        kernels = step_kernels(executions, span, steps, peaks)
        lines += (row_report(row, kernels, step_kernels(executions, span, steps, peaks, by_layer=True)) if kernels else
                  [f"### {row['engine']}, {row['precision']}, batch {row['global_batch_size']}", "",
                   "oneDNN logged no kernel in its timed steps."]) + [""]
    return "\n".join(lines)
