"""The flags of the exports for devices (--tflite, --tflite-tolerance: serving.tflite). Nothing here
imports TensorFlow."""
from pipeline.flag_types import DEFAULT_TOLERANCE, RecordedStore, fraction, tflite_kinds


def add_tflite_flags(parser):
    """Adds --tflite and --tflite-tolerance to `parser`; returns their group."""
    group = parser.add_argument_group("exports for devices")
    group.add_argument("--tflite", type=tflite_kinds, default=(), metavar="float32,float16,int8",
                       help="after the final export, convert its pixels signature (uint8 images) to TensorFlow Lite "
                            "in these kinds (int8: full-integer, calibrated on training images) into <model "
                            "dir>/export/tflite/<timestamp>/, and measure each on the test split against the "
                            "SavedModel (accuracy, agreement, size, latency; see docs/exports.md). Default: none")
    group.add_argument("--tflite-tolerance", type=fraction, default=DEFAULT_TOLERANCE, action=RecordedStore,
                       help="test accuracy the int8 model may lose against the SavedModel before the summary "
                            "warns and results.json flags it")
    return group
