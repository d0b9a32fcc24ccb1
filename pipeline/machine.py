"""What this machine computes on: the CPU model and the flags that decide 16-bit speed, the GPUs,
and whether a precision runs well on them."""
import os
import platform

import tensorflow as tf

from models import GRAPH_REWRITE_PRECISIONS
from pipeline.errors import FlagError

# Instruction sets that decide how fast float32, bfloat16 and float16 math runs on a CPU.
NOTABLE_CPU_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16")


def read_cpuinfo(path="/proc/cpuinfo"):
    """Returns the first CPU's /proc/cpuinfo fields as a dict (empty where unreadable)."""
    fields = {}
    try:
        with open(path) as f:
            for line in f:
                if not line.strip():
                    break
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
    except OSError:
        pass
    return fields


def _cpuinfo(path="/proc/cpuinfo"):
    """Returns (model name, set of flags) of the first CPU in `path` (empty where unknown)."""
    fields = read_cpuinfo(path)
    return (fields.get("model name") or platform.processor() or platform.machine(),
            set(fields.get("flags", "").split()))


def describe_cpu(path="/proc/cpuinfo"):
    """Returns e.g. 'AMD EPYC, 2 cores, avx2 fma avx512f avx512_vnni avx512_bf16, no amx_tile amx_bf16'."""
    model, flags = _cpuinfo(path)
    has = [f for f in NOTABLE_CPU_FLAGS if f in flags]
    lacks = [f for f in NOTABLE_CPU_FLAGS if f not in flags and f.startswith(("avx512_bf16", "amx"))]
    return f"{model}, {os.cpu_count()} cores, {' '.join(has) or 'no AVX'}" + (f", no {' '.join(lacks)}" if lacks else "")


def describe_gpus():
    """Returns 'NAME (compute capability X.Y)' for each visible GPU."""
    described = []
    for gpu in tf.config.list_physical_devices("GPU"):
        details = tf.config.experimental.get_device_details(gpu)
        capability = details.get("compute_capability")
        described.append(f"{details.get('device_name', gpu.name)}"
                         + (f" (compute capability {capability[0]}.{capability[1]})" if capability else ""))
    return described


def precision_warning(precision, uses_gpus, cpuinfo="/proc/cpuinfo"):
    """Returns one line when `precision` will likely run no faster than fp32 (or slower) on this
    machine's devices, else None: bf16 needs AVX512_BF16 or AMX on a CPU and compute capability
    8.0 on a GPU; fp16 needs a GPU (tensor cores from 7.0)."""
    if precision == "fp32":
        return None
    if uses_gpus:
        needed = (8, 0) if precision == "bf16" else (7, 0)
        slow = [gpu for gpu in tf.config.list_physical_devices("GPU")
                if tuple(tf.config.experimental.get_device_details(gpu).get("compute_capability", (0, 0))) < needed]
        if slow:
            return (f"--precision {precision} runs best on GPUs of compute capability {needed[0]}.{needed[1]} or "
                    f"newer; {len(slow)} of these GPUs are older, so expect little or no speed-up")
        return None
    _, flags = _cpuinfo(cpuinfo)
    if precision == "fp16":
        return ("--precision fp16 on a CPU: TensorFlow computes float16 there no faster than float32 (often "
                "slower); use bf16 on a CPU with AVX512_BF16 or AMX, or fp32")
    if not flags & {"avx512_bf16", "amx_bf16"}:
        return (f"--precision {precision} on a CPU without AVX512_BF16 or AMX: bfloat16 math is emulated, so "
                "expect it to be slower than fp32")
    return None


def auto_precision(uses_gpus, cpuinfo="/proc/cpuinfo"):
    """Returns (precision, why) for --precision auto: 'bf16' where the devices compute bfloat16
    natively (GPUs all of compute capability 8.0 or newer; a CPU with AMX or AVX512_BF16), else
    'fp32'; `why` says what decided it, for the header and results.json."""
    if uses_gpus:
        capabilities = [tuple(tf.config.experimental.get_device_details(gpu).get("compute_capability", (0, 0)))
                        for gpu in tf.config.list_physical_devices("GPU")]
        if capabilities and min(capabilities) >= (8, 0):
            return "bf16", f"GPUs of compute capability {min(capabilities)[0]}.{min(capabilities)[1]} (>= 8.0)"
        return "fp32", "a GPU older than compute capability 8.0 (bf16 is not native there)"
    _, flags = _cpuinfo(cpuinfo)
    native = [flag for flag in ("amx_bf16", "avx512_bf16") if flag in flags]
    if native:
        return "bf16", f"this CPU has {' and '.join(native)}"
    return "fp32", "this CPU has neither AMX nor AVX512_BF16 (bf16 would be emulated, slower than fp32)"


def conv_gradients_choice(requested, precision, uses_gpus, cpuinfo="/proc/cpuinfo"):
    """Returns (mode, why) for --conv-gradients `requested`: 'matmul' or 'onednn' as asked (why None); for
    'auto', 'matmul' when `precision` computes in bfloat16 on a CPU with AMX (oneDNN 3.2's AMX weight-gradient
    kernel is slow on wide layers with few positions: pipeline.conv_gradients), else 'onednn'."""
    if requested != "auto":
        return requested, None
    if uses_gpus:
        return "onednn", "training on GPUs"
    if GRAPH_REWRITE_PRECISIONS.get(precision, precision) != "bf16":
        return "onednn", f"{precision} math"
    if "amx_bf16" not in _cpuinfo(cpuinfo)[1]:
        return "onednn", "this CPU has no AMX"
    return "matmul", "bfloat16 on a CPU with AMX"


def resolved_conv_gradients(settings):
    """Returns `settings` with --conv-gradients auto resolved for its (resolved) precision: `conv_gradients`
    'matmul' or 'onednn', and `conv_gradients_reason` saying why auto picked it (None when asked)."""
    mode, why = conv_gradients_choice(settings.conv_gradients, settings.precision, _uses_gpus(settings))
    return settings.replace(conv_gradients=mode, conv_gradients_reason=why)


def graph_rewrite_unavailable(uses_gpus, cpuinfo="/proc/cpuinfo"):
    """Returns why TensorFlow's oneDNN bfloat16 rewrite (--precision bf16-amp) would leave the model
    float32 on these devices, with the fix, or None where it applies: it rewrites CPU ops only, and
    only on CPUs with AVX-512 (TF 2.15's IsBF16SupportedByOneDNNOnThisCPU)."""
    if uses_gpus:
        return "TensorFlow's oneDNN rewrite runs on CPUs only; on GPUs use --precision bf16"
    _, flags = _cpuinfo(cpuinfo)
    if "avx512f" not in flags:
        return ("this CPU has no AVX-512, where TensorFlow's oneDNN rewrite leaves the model float32; use "
                "--precision bf16 or fp32")
    return None


def _uses_gpus(settings):
    """Returns whether the run trains on GPUs: some are visible and no flag keeps it on the CPU."""
    return bool(tf.config.list_physical_devices("GPU")) and settings.cpu_replicas is None and settings.gpus != 0


def bf16_unusable(settings, in_cluster, precision="bf16"):
    """Returns why `precision` (bf16, the Keras policy, or bf16-amp, the oneDNN rewrite) cannot train or
    convert this run, or None: in a cluster on CPUs TensorFlow 2.15's distributed runtime runs ReLU on a
    kernel without bfloat16 ("Value for attr 'T' of bfloat16 is not in the list of allowed values", both
    ways), and TFLite has no bfloat16 tensors for the bf16 policy's export ("invalid TFLite type";
    bf16-amp's export is float32)."""
    if in_cluster and not _uses_gpus(settings):
        return ("a cluster on CPUs runs TensorFlow 2.15's distributed runtime, whose ReLU kernel has no "
                "bfloat16 (the tasks fail at their first step)")
    if precision == "bf16" and getattr(settings, "tflite", None):
        return ("--tflite converts the export, and TFLite has no bfloat16 tensors for a bf16 export (the export "
                "of fp32 and bf16-amp is float32)")
    return None


# The strategies Keras's LossScaleOptimizer (fp16's) refuses, by the name TensorFlow's error gives them.
FP16_STRATEGIES_REFUSED = {"central_storage": "CentralStorageStrategy", "parameter_server": "ParameterServerStrategy"}


def resolved_precision(settings, in_cluster=False):
    """Returns `settings` with --precision auto resolved (see auto_precision; fp32 where bf16_unusable
    says why): the precision picked, and `precision_requested` and `precision_reason` saying how.
    Raises FlagError (exit 2) for bf16-amp where the rewrite would leave the model float32 (see
    graph_rewrite_unavailable), for bf16 where it is unusable (`in_cluster`: a task of a cluster), and for fp16
    under a strategy Keras's loss scaling refuses (FP16_STRATEGIES_REFUSED)."""
    if settings.precision in GRAPH_REWRITE_PRECISIONS:
        unavailable = graph_rewrite_unavailable(_uses_gpus(settings))
        if unavailable:
            raise FlagError(f"--precision {settings.precision}: {unavailable}")
    if settings.precision == "fp16" and settings.strategy in FP16_STRATEGIES_REFUSED:
        raise FlagError(f"--precision fp16 --strategy {settings.strategy}: Keras's loss scaling, which fp16 trains "
                        "with, runs under the mirrored strategies only (TensorFlow refuses "
                        f"{FP16_STRATEGIES_REFUSED[settings.strategy]} at the model's first graph); use --strategy "
                        f"{'multi_worker_mirrored' if settings.strategy == 'parameter_server' else 'mirrored'}, "
                        "or --precision bf16 or fp32")
    if settings.precision != "auto":
        unusable = (settings.precision == "bf16" or settings.precision in GRAPH_REWRITE_PRECISIONS) and \
            bf16_unusable(settings, in_cluster, settings.precision)
        if unusable:
            raise FlagError(f"--precision {settings.precision}: {unusable}; use --precision fp32")
        return settings.replace(precision_requested=settings.precision, precision_reason=None)
    picked, why = auto_precision(_uses_gpus(settings))
    unusable = picked == "bf16" and bf16_unusable(settings, in_cluster)
    if unusable:
        picked, why = "fp32", f"bf16 would be native ({why}), but {unusable}"
    return settings.replace(precision=picked, precision_requested="auto", precision_reason=why)
