"""The command-line flags every training job shares, defined once, a module a group: training.py (data
and training), devices.py (devices and the cluster), mixing.py (label smoothing, mixup, cutmix), tflite.py (exports for devices), output.py (checkpoints, logs, the test report) and
pipeline/validation/flags.py (validation and early stopping); their argparse types are in
pipeline/flag_types.py. A task supplies its defaults and may add flags of its own; `build_parser`
returns the parser for its script. Nothing here imports TensorFlow, so `--help` and a bad flag answer
at once."""

from pipeline.flag_types import ArgumentParser, HelpFormatter
from pipeline.flags.devices import STRATEGIES, add_cluster_flags, add_device_flags
from pipeline.flags.mixing import add_mixing_flags
from pipeline.flags.output import add_output_flags, add_report_flags
from pipeline.flags.tflite import add_tflite_flags
from pipeline.flags.training import add_data_dir_flag, add_data_flags, add_training_flags
from pipeline.validation.flags import add_validation_flags

__all__ = ["STRATEGIES", "add_data_dir_flag", "build_parser"]


def build_parser(task):
    """Returns the argument parser for `task`: the shared flags with the task's defaults, then its own."""
    parser = ArgumentParser(description=task.description, formatter_class=HelpFormatter)
    add_data_flags(parser, task)
    add_training_flags(parser, task)
    add_device_flags(parser)
    add_cluster_flags(parser)
    add_output_flags(parser, task)
    add_report_flags(parser, task)
    add_validation_flags(parser, task.defaults)
    add_mixing_flags(parser)
    add_tflite_flags(parser)
    task.add_flags(parser)
    parser.set_defaults(explicit_flags=frozenset())  # filled by RecordedStore's flags
    return parser
