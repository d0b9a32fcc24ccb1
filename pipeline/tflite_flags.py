"""The flags of the exports for devices (--tflite, --tflite-tolerance: serving.tflite), defined once
for every job's parser (imports no TensorFlow)."""
import argparse

from pipeline.flags import fraction

TFLITE_KINDS = ("float32", "float16", "int8")  # serving.tflite.KINDS, named here without importing TensorFlow
DEFAULT_TOLERANCE = 0.02  # test accuracy an int8 model may lose before the summary warns


def tflite_kinds(text):
    """argparse type: a comma-separated subset of TFLITE_KINDS (each once); returns them in TFLITE_KINDS'
    order, or () for 'none'."""
    if text.strip().lower() == "none":
        return ()
    kinds = [k.strip().lower() for k in text.split(",")]
    unknown = [k for k in kinds if k not in TFLITE_KINDS]
    if unknown or len(set(kinds)) != len(kinds):
        raise argparse.ArgumentTypeError(f"expected some of {','.join(TFLITE_KINDS)} (comma-separated, each once) "
                                         f"or none, got {text!r}")
    return tuple(k for k in TFLITE_KINDS if k in kinds)


def add_tflite_flags(parser):
    """Adds --tflite and --tflite-tolerance to `parser`; returns their group."""
    group = parser.add_argument_group("exports for devices")
    group.add_argument("--tflite", type=tflite_kinds, default=(), metavar="float32,float16,int8",
                       help="after the final export, convert its pixels signature (uint8 images) to TensorFlow Lite "
                            "in these kinds (int8: full-integer, calibrated on training images) into <model "
                            "dir>/export/tflite/<timestamp>/, and measure each on the test split against the "
                            "SavedModel (accuracy, agreement, size, latency; see docs/exports.md). Default: none")
    group.add_argument("--tflite-tolerance", type=fraction, default=DEFAULT_TOLERANCE,
                       help="test accuracy the int8 model may lose against the SavedModel before the summary "
                            "warns and results.json flags it")
    return group
