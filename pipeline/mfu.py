"""Model FLOPs utilisation (MFU): a training throughput read against the machine's peak.

MFU = images/sec x training FLOPs per image (models.flops) / peak FLOP/s (pipeline.peak).
The run loop and the benchmark both take their figures from here.
"""
import logging

import tensorflow as tf

from models import math_precision
from models.flops import model_flops_per_image
from pipeline import peak as peak_lib

log = logging.getLogger(__name__)


def gpu_names(devices):
    """Returns the device names of the GPUs among `devices` ('/gpu:N'), in order."""
    names = []
    for device in devices:
        if "gpu" in device.lower():
            index = int(device.rsplit(":", 1)[-1])
            gpu = tf.config.list_physical_devices("GPU")[index]
            names.append(tf.config.experimental.get_device_details(gpu).get("device_name", gpu.name))
    return names


def peak_for(precision, devices, probe=True):
    """Returns the Peak that a run on `devices` (pipeline.distribution's names) is read against."""
    return peak_lib.machine_peak(math_precision(precision), devices, gpu_names(devices), probe=probe)


def run_figures(keras_model, precision, devices, probe=True):
    """Returns (FLOPs per image {'forward', 'training'}, Peak) of a run of `keras_model` on `devices`."""
    return model_flops_per_image(keras_model), peak_for(precision, devices, probe)


def mfu(images_per_sec, training_flops_per_image, peak):
    """Returns the model FLOPs utilisation, or None when the throughput or the peak is unknown.
    Logs one warning when it is above 1, naming the count and the peak."""
    if not images_per_sec or peak is None or not peak.flops:
        return None
    achieved = images_per_sec * training_flops_per_image
    fraction = achieved / peak.flops
    if fraction > 1:
        log.warning("MFU %.2f is above 1: %s per training image x %.1f images/sec = %s/s, above the peak "
                    "of %s/s (%s): that peak is not the best this machine does (probed while the CPU was busy?); "
                    "scripts/probe_peak.py measures it again, on a quiet machine",
                    fraction, format_flops(training_flops_per_image), images_per_sec, format_flops(achieved),
                    format_flops(peak.flops), peak.source)
    return fraction


def format_flops(flops):
    """Returns e.g. '5.59 MFLOP', '2.51 GFLOP', '215 GFLOP' (3 significant digits), or 'unknown'."""
    if flops is None:
        return "unknown"
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if flops >= scale:
            return f"{flops / scale:.3g} {prefix}FLOP"
    return f"{flops:.3g} FLOP"


def header_lines(flops, peak):
    """Returns the run header's lines about the model's FLOPs and the peak they are read against."""
    beside = "nominal peak" if peak.source.startswith("measured") else "measured peak"
    factor = f" ({flops['training'] / flops['forward']:.2f} x forward)" if flops["forward"] else ""
    return (f"  model FLOPs:   {format_flops(flops['forward'])} per image forward, "
            f"{format_flops(flops['training'])} training{factor}\n"
            f"  peak:          {_rate(peak.flops)}, the {peak.source} ({peak.detail}): MFU is read against it\n"
            f"  {beside + ':':15s}{_rate(peak.nominal)}, {peak.nominal_source}")


def _rate(flops):
    return f"{format_flops(flops)}/s" if flops else "unknown"


def describe_mfu(results):
    """Returns the end-of-run words for `results`' MFU ('' for results without one)."""
    if results.get("mfu") is None:
        return ""
    peak = results["peak_flops"]
    return f"; MFU {results['mfu']:.2f} of {_rate(peak['flops'])}, the {peak['source']}"
