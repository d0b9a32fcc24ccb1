"""The machine's peak FLOP/s, which a run's model FLOPs utilisation (MFU) is read against.

On a CPU the peak is measured: the best of a few matmul and convolution shapes in the
run's precision, in FLOPs per CPU second x the cores (so that other processes on a shared
machine hardly lower it), probed once per CPU model and core count and kept in a cache file
(PEAK_CACHE_ENV overrides its path) that keeps the highest figure ever probed. Beside
it a nominal peak: cores x FLOPs per cycle of the CPU family x the clock /proc/cpuinfo
reports (on VMs the base clock, so it can fall below the measured one). On a GPU the
peak is the datasheet's dense figure for the precision, with a measured matmul beside it.
"""
import dataclasses
import json
import logging
import os
import re
import time
from typing import Optional

import tensorflow as tf

from acquisition import storage
from pipeline.machine import read_cpuinfo

log = logging.getLogger(__name__)

PEAK_CACHE_ENV = "PIPELINE_PEAK_CACHE"
DTYPES = {"fp32": tf.float32, "bf16": tf.bfloat16, "fp16": tf.float16}

# FLOPs per cycle per core, by precision, of the CPU families whose vector units are known:
# (name, vendor_id, cpu families, flags it needs, flags it must lack, {precision: FLOPs/cycle}).
CPU_FAMILIES = (
    ("AMD Zen 5", "AuthenticAMD", (26,), {"avx512f"}, set(), {"fp32": 64, "bf16": 128}),  # 2 x 512-bit FMA
    ("AMD Zen 4", "AuthenticAMD", (25,), {"avx512f"}, set(), {"fp32": 32, "bf16": 64}),  # 2 x 256-bit FMA
    ("AMD Zen 2/3", "AuthenticAMD", (23, 25), {"avx2", "fma"}, {"avx512f"}, {"fp32": 32}),
    ("Intel Xeon with AMX", "GenuineIntel", (6,), {"amx_bf16", "avx512f"}, set(), {"fp32": 64, "bf16": 1024}),
    ("Intel with AVX-512 (2 FMA units)", "GenuineIntel", (6,), {"avx512f"}, set(), {"fp32": 64}),
    ("Intel with AVX2 and FMA", "GenuineIntel", (6,), {"avx2", "fma"}, {"avx512f"}, {"fp32": 32}),
)

# Dense (no sparsity) datasheet peaks in TFLOP/s. fp32 on compute capability 8.0 and newer is
# TensorFlow's default TF32 on tensor cores. Patterns match TensorFlow's device names.
GPU_PEAKS = (
    (r"H100.*PCIe", {"fp32": 378.0, "bf16": 756.0, "fp16": 756.0}),
    (r"H100.*(SXM|HBM3)", {"fp32": 494.7, "bf16": 989.4, "fp16": 989.4}),
    (r"A100", {"fp32": 156.0, "bf16": 312.0, "fp16": 312.0}),
    (r"V100-PCIE", {"fp32": 14.0, "fp16": 112.0}),
    (r"V100-SXM", {"fp32": 15.7, "fp16": 125.0}),
    (r"\bL4\b", {"fp32": 60.0, "bf16": 121.0, "fp16": 121.0}),
)

# What the probe times, in this order (the best on an AVX-512 Zen 5 first): 3x3 'same' convolutions
# (batch, size, channels) of VGG's shapes at training batch sizes and matmuls (rows, columns) x
# (columns, columns), each chained a few times in one graph so that per-call costs vanish.
PROBE_SHAPES = (("conv", (64, 8, 512)), ("gemm", (4096, 2048)), ("conv", (64, 16, 256)),
                ("conv", (32, 28, 256)), ("gemm", (8192, 1024)), ("conv", (4, 112, 64)))
CHAIN = 4


@dataclasses.dataclass
class Peak:
    """A peak in FLOP/s (None when unknown), what it is (`source`), how it was had (`detail`) and
    the nominal one beside it."""
    flops: Optional[float]
    source: str
    detail: str = ""
    nominal: Optional[float] = None
    nominal_source: str = "unknown"

    def as_dict(self):
        """Returns the peak as results.json records it."""
        return dataclasses.asdict(self)


def nominal_cpu_peak(precision, cpuinfo=None, cores=None):
    """Returns (FLOP/s or None, description): cores x FLOPs/cycle of the CPU family x the clock
    /proc/cpuinfo reports; None with 'unknown ...' when the family or the clock is not known."""
    info = read_cpuinfo() if cpuinfo is None else cpuinfo
    cores = cores or os.cpu_count()
    flags = set(info.get("flags", "").split())
    family = int(info["cpu family"]) if info.get("cpu family", "").isdigit() else None
    for name, vendor, families, needs, lacks, per_cycle in CPU_FAMILIES:
        if info.get("vendor_id") == vendor and family in families and needs <= flags and not lacks & flags:
            break
    else:
        return None, "unknown (CPU family not in the table)"
    try:
        hertz = float(info["cpu MHz"]) * 1e6
    except (KeyError, ValueError):
        return None, f"unknown ({name}: no clock in /proc/cpuinfo)"
    if precision not in per_cycle:
        return None, f"unknown ({name}: no {precision} figure in the table)"
    return (cores * per_cycle[precision] * hertz,
            f"{cores} cores x {per_cycle[precision]} {precision} FLOPs/cycle ({name}) x {hertz / 1e9:.2f} GHz")


def gpu_table_peak(device_name, precision):
    """Returns the dense datasheet peak in FLOP/s of one GPU named `device_name`, or None."""
    for pattern, peaks in GPU_PEAKS:
        if re.search(pattern, device_name, re.IGNORECASE):
            return peaks[precision] * 1e12 if precision in peaks else None
    return None


def _chained_graph(kind, shape, dtype, device, chain=CHAIN):
    """Returns (graph, its initializer, op to run, FLOPs of one run) of `chain` dependent matmuls or
    convolutions on inputs held in variables, so that a run times the math and not the making of
    its inputs (which took up to a third of a run when they were generated in it)."""
    graph = tf.Graph()
    with graph.as_default(), tf.device(device):
        if kind == "gemm":
            rows, columns = shape
            x_shape, w_shape, fan_in = (rows, columns), (columns, columns), columns
        else:
            batch, size, channels = shape
            x_shape, w_shape, fan_in = (batch, size, size, channels), (3, 3, channels, channels), 9 * channels
        # Seeded: under --deterministic (op determinism on) an unseeded random op is an error.
        x = tf.compat.v1.Variable(tf.cast(tf.random.normal(x_shape, seed=1), dtype))
        w = tf.compat.v1.Variable(tf.cast(tf.random.normal(w_shape, stddev=fan_in ** -0.5, seed=2), dtype))
        y = x.read_value()
        for _ in range(chain):
            y = tf.matmul(y, w) if kind == "gemm" else tf.nn.conv2d(y, w, strides=1, padding="SAME")
        op = tf.reduce_sum(tf.cast(y[:1], tf.float32))
        initializer = tf.compat.v1.variables_initializer([x, w])
    return graph, initializer, op, _chained_graph_flops(kind, shape, chain)


def _seconds_per_run(kind, shape, dtype, device):
    """Returns the wall seconds one run of the shape's chained graph should take, from one run of a
    pilot of a 256th of its FLOPs (a 64th of the rows or the batch, unchained): float16 matmuls on a
    CPU without native float16 ran at 1 GFLOP/s, 150 s a run, against 0.6 s for its convolutions."""
    pilot_shape = (max(1, shape[0] // 64),) + tuple(shape[1:])
    graph, initializer, op, flops = _chained_graph(kind, pilot_shape, dtype, device, chain=1)
    with tf.compat.v1.Session(graph=graph) as session:
        session.run(initializer)
        start = time.perf_counter()
        session.run(op)
        seconds = time.perf_counter() - start
    return seconds * _chained_graph_flops(kind, shape) / flops


def _chained_graph_flops(kind, shape, chain=CHAIN):
    """Returns the FLOPs of one run of _chained_graph(kind, shape, ..., chain)."""
    if kind == "gemm":
        rows, columns = shape
        return chain * 2 * rows * columns * columns
    batch, size, channels = shape
    return chain * 2 * batch * size * size * channels * channels * 9


def probe_shapes(precision, device="/cpu:0", budget_seconds=6.0):
    """Returns [(shape, best FLOP/s)] over PROBE_SHAPES in `precision` on `device`:
    each shape run once to warm up, then timed up to 3 times while the budget lasts (at least
    one shape is timed; after the first, a shape one run of which would overrun the budget by more
    than the budget, by a pilot run, is left out).

    On a CPU a run's rate is its FLOPs over the process CPU seconds it took, times the cores:
    what all the cores do when they are the process's. Other processes on a shared machine
    lower the wall-clock rate (to a quarter, measured) but hardly this one.
    """
    on_cpu = "cpu" in device.lower()
    clock = time.process_time if on_cpu else time.perf_counter
    scale = os.cpu_count() if on_cpu else 1
    figures, spent = [], 0.0
    for kind, shape in PROBE_SHAPES:
        if figures and _seconds_per_run(kind, shape, DTYPES[precision], device) > 2 * budget_seconds - spent:
            continue  # one run would overrun the budget by more than the budget: a kernel far from the peak
        graph, initializer, op, flops = _chained_graph(kind, shape, DTYPES[precision], device)
        best = 0.0
        with tf.compat.v1.Session(graph=graph) as session:
            session.run(initializer)
            for run in range(4):
                start, wall = clock(), time.perf_counter()
                session.run(op)
                elapsed = clock() - start
                spent += time.perf_counter() - wall
                if run and elapsed > 0:
                    best = max(best, scale * flops / elapsed)
                if spent > budget_seconds and (run or figures):
                    break
        if best:
            figures.append((f"{kind} {'x'.join(map(str, shape))}", best))
        if spent > budget_seconds:
            break
    return figures


def probe_peak(precision, device="/cpu:0", budget_seconds=6.0):
    """Returns (best FLOP/s, the shape that reached it) of probe_shapes."""
    shape, flops = max(probe_shapes(precision, device, budget_seconds), key=lambda figure: figure[1])
    return flops, shape


def cache_path():
    """Returns the peak cache file: $PIPELINE_PEAK_CACHE, or ~/.cache/estimator-pipeline/peak_flops.json."""
    return os.environ.get(PEAK_CACHE_ENV) or os.path.join(
        os.path.expanduser("~"), ".cache", "estimator-pipeline", "peak_flops.json")


def _read_cache(path):
    try:
        return json.loads(storage.read_text(path))
    except (OSError, ValueError):
        return {}


def _write_cache(path, cache):
    """Writes the peak cache; returns why it could not (a read-only home: the next run probes again), or None."""
    try:
        storage.makedirs(os.path.dirname(storage.absolute(path)))
        storage.write_atomically(path, json.dumps(cache, indent=2))
    except OSError as e:
        return e.strerror or str(e)
    return None


def cpu_identity(cpuinfo):
    """Returns what tells two CPUs apart in the peak cache: the model name, family and model
    (a cloud's 'AMD EPYC' names several generations) and the vector flags."""
    flags = set(cpuinfo.get("flags", "").split())
    vector = " ".join(f for f in ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16") if f in flags)
    return (f"{cpuinfo.get('model name', 'unknown CPU')} (family {cpuinfo.get('cpu family', '?')}, "
            f"model {cpuinfo.get('model', '?')}; {vector or 'no AVX2'})")


def machine_key(name, cores):
    """Returns the cache key of a machine: its processor's name and core count."""
    return f"{name} / {cores} cores"


def measured_peak(precision, name, cores, probe=True, device="/cpu:0", path=None, probe_fn=probe_peak,
                  refresh=False):
    """Returns (FLOP/s, detail) measured on `device` for the machine `name` with `cores`: the
    cached figure when there is one (and not `refresh`), else (when `probe`) a fresh probe,
    cached; (None, why) otherwise. The cache keeps the highest figure per machine and precision."""
    path = path or cache_path()
    key = machine_key(name, cores)
    cached = _read_cache(path).get(key, {}).get(precision)
    if cached and not refresh:
        return cached["flops"], f"best shape {cached['shape']}, probed {cached['probed_at']}, cached in {path}"
    if not probe:
        return None, "not measured: only the chief of a cluster probes the peak"
    log.info("measuring this machine's %s peak FLOP/s (a few seconds, once: cached in %s)", precision, path)
    try:
        flops, shape = probe_fn(precision, device)
    except tf.errors.OpError as e:  # a precision or device the probe's ops do not run on
        log.warning("the %s peak could not be measured on %s (%s): no MFU for this run", precision, device,
                    e.message.strip().splitlines()[0])
        return None, f"not measured: the probe failed on {device}"
    cache = _read_cache(path)  # again: another run may have written it meanwhile
    previous = cache.setdefault(key, {}).get(precision)
    unwritable = None
    if not previous or previous["flops"] < flops:
        cache[key][precision] = {"flops": flops, "shape": shape,
                                 "probed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        unwritable = _write_cache(path, cache)
    else:
        flops, shape = previous["flops"], previous["shape"]
    if unwritable:
        return flops, (f"best shape {shape}, probed now, not cached ({path}: {unwritable}; set {PEAK_CACHE_ENV} "
                       "to a writable file to probe once)")
    return flops, f"best shape {shape}, probed now, cached in {path}"


def machine_peak(precision, devices, gpu_names=(), probe=True, cpuinfo=None):
    """Returns the Peak that a run on `devices` in `precision` is read against.

    CPU devices (logical ones share the cores): the measured peak, the nominal one beside it.
    GPUs (`gpu_names`, one per device used): the datasheet's dense peak x the GPUs, with one
    GPU's measured matmul x the GPUs beside it; the measured one alone for a GPU not in the table.
    """
    if devices and "gpu" in devices[0].lower():
        count = len(devices)
        table = [gpu_table_peak(name, precision) for name in gpu_names]
        name = gpu_names[0] if gpu_names else "GPU"
        measured, detail = measured_peak(precision, name, 1, probe=probe, device=devices[0])
        measured_source = f"measured {precision} matmul/conv peak of {count} x {name}"
        if table and all(table):
            return Peak(sum(table), f"{precision} dense datasheet peak of {count} x {name}", "from pipeline.peak's table",
                        measured * count if measured else None, f"{measured_source} ({detail})")
        return Peak(measured * count if measured else None, measured_source, detail, None,
                    "unknown (GPU not in the table)")
    info = read_cpuinfo() if cpuinfo is None else cpuinfo
    name, cores = info.get("model name", "unknown CPU"), os.cpu_count()
    flops, detail = measured_peak(precision, cpu_identity(info), cores, probe=probe)
    nominal, nominal_source = nominal_cpu_peak(precision, info, cores)
    return Peak(flops, f"measured {precision} peak of {name}, {cores} cores", detail, nominal, nominal_source)
