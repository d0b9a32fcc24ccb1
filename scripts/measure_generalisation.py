#!/usr/bin/env python
"""Measure what --ema, --label-smoothing, --mixup/--cutmix, --tta and --calibrate temperature (and, named
in --arms, --weight-decay and --optimizer sgd) each do to a job's test accuracy, NLL and ECE, paired by seed
against the plain run; see --help."""
import argparse
import os
import shlex
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pipeline.cli import run_command  # noqa: E402
from pipeline.flag_types import checkpoint_folder, name_list, non_negative_float, open_fraction, positive_float  # noqa: E402
from pipeline.flags import build_parser as build_job_parser  # noqa: E402
from pipeline.tasks.registry import TASKS, tool_parser  # noqa: E402
from benchmark import ARM_SGD_RATE, ARM_WEIGHT_DECAY, DEFAULT_GENERALISATION_ARMS as DEFAULT_ARMS, \
    GENERALISATION_ARMS as ARM_NAMES  # noqa: E402

OWN_FLAGS = ("--seed", "--model-dir", "--eval-only", "--deterministic", "--calibrate", "--ema", "--label-smoothing",
             "--mixup", "--cutmix", "--tta", "--weight-decay")
SGD_ARM_FLAGS = ("--optimizer",)  # with the sgd arm the plain run is Adam's (at the job's --learning-rate)
# Each arm's value, when not given, and the arm each value flag belongs to.
ARM_DEFAULTS = {"ema_decay": 0.99, "label_smoothing": 0.1, "mixup": 0.2, "cutmix": 1.0, "tta": "flip",
                "weight_decay": ARM_WEIGHT_DECAY, "sgd_rate": ARM_SGD_RATE}
ARM_VALUE_FLAGS = {"--ema-decay": "ema", "--label-smoothing": "label_smoothing", "--mixup": "mixup_cutmix",
                   "--cutmix": "mixup_cutmix", "--tta": "tta", "--weight-decay": "weight_decay", "--sgd-rate": "sgd"}


def seed_list(text):
    """argparse type: 'FIRST-LAST' or comma-separated seeds, at least two (a paired test needs them)."""
    try:
        first, _, last = text.partition("-")
        seeds = list(range(int(first), int(last) + 1)) if last else [int(s) for s in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected FIRST-LAST or comma-separated seeds, got {text!r}") from None
    if len(set(seeds)) < 2 or min(seeds) < 0:
        raise argparse.ArgumentTypeError(f"expected two or more different seeds from 0, got {text!r}")
    if len(set(seeds)) < len(seeds):
        raise argparse.ArgumentTypeError(f"a seed repeats in {text!r}: give each seed once")
    return seeds


def arm_list(text):
    """argparse type: comma-separated names of ARM_NAMES, each once (name_list refuses a name twice)."""
    names = name_list(text) or ()
    unknown = [n for n in names if n not in ARM_NAMES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"expected arms of {', '.join(ARM_NAMES)}, got {text!r}")
    return tuple(names)


def build_parser():
    """Returns the parser: the measurement's own flags; the rest go to the job."""
    parser = tool_parser("Train a job once per seed plainly and once with each of --ema, --label-smoothing and "
                         "--mixup/--cutmix (all with --deterministic and --calibrate temperature), evaluate the "
                         "plain model again with --tta, and write each tool's paired difference from the plain "
                         "run in test accuracy, NLL and ECE (results.csv, summary.json, report.md). Needs a "
                         "validation split (temperature scaling is fitted on it).", task_help="which job to train")
    parser.add_argument("--output", required=True, type=checkpoint_folder,  # (the runs' model dirs are in it)
                        help="folder for the runs, their reports and the table; "
                                                        "a run whose report is there is not made again")
    parser.add_argument("--seeds", type=seed_list, default="1-5", help="the seeds, e.g. 1-5 or 1,4,9")
    parser.add_argument("--name", default=None, help="the data's name in the report (default: the job's)")
    parser.add_argument("--ema-decay", type=open_fraction, default=None,
                        help=f"the ema arm's --ema (default {ARM_DEFAULTS['ema_decay']:g})")
    parser.add_argument("--label-smoothing", type=open_fraction, default=None,
                        help="the label_smoothing arm's --label-smoothing "
                             f"(default {ARM_DEFAULTS['label_smoothing']:g})")
    parser.add_argument("--mixup", type=positive_float, default=None,
                        help=f"the mixup_cutmix arm's --mixup (default {ARM_DEFAULTS['mixup']:g})")
    parser.add_argument("--cutmix", type=positive_float, default=None,
                        help=f"the mixup_cutmix arm's --cutmix (default {ARM_DEFAULTS['cutmix']:g})")
    parser.add_argument("--tta", choices=("flip", "flip,crops"), default=None, metavar="flip|flip,crops",
                        help="the tta arm's views: 'flip' (default) or 'flip,crops'")
    parser.add_argument("--arms", type=arm_list, default=",".join(DEFAULT_ARMS), metavar="ARM,...",
                        help=f"the arms beside the plain run, of {', '.join(ARM_NAMES)}")
    parser.add_argument("--weight-decay", type=non_negative_float, default=None,
                        help="the weight_decay arm's --weight-decay (Adam's decoupled decay: AdamW; default "
                             f"{ARM_WEIGHT_DECAY:g}); "
                             "only with that arm: the plain run trains without decay")
    parser.add_argument("--sgd-rate", type=positive_float, default=None,
                        help="the sgd arm's --learning-rate (--optimizer sgd, Nesterov momentum 0.9; default "
                             f"{ARM_SGD_RATE:g})")
    parser.allow_abbrev = False  # the job's --seed is not this tool's --seeds
    return parser


def _parse(parser, argv):
    """Returns (the measurement's args, the task, the job's flags as given): the job's own parser
    checks those first (exit 2), and the flags the measurement sets itself are refused there."""
    args, job_argv = parser.parse_known_args(argv)
    task = TASKS[args.task]
    build_job_parser(task).parse_args(job_argv)
    # (These flags share their names with the job's: given without their arm, they would change nothing.)
    for flag, arm in ARM_VALUE_FLAGS.items():
        if getattr(args, flag[2:].replace("-", "_")) is not None and arm not in args.arms:
            parser.error(f"argument {flag}: sets the {arm} arm's value, and --arms does not name that arm; add {arm} "
                         f"to --arms (the measurement's plain run trains without it)")
    own = OWN_FLAGS + (SGD_ARM_FLAGS if "sgd" in args.arms else ())
    clash = [f for f in own if any(a == f or a.startswith(f + "=") for a in job_argv)]
    if clash:
        parser.error(f"argument {clash[0]}: the measurement sets it for each run; leave it out")
    return args, task, job_argv


def given_settings(parser, argv):
    """Returns {setting: repr of its value} of the flags `argv` sets to other than their defaults, as `parser` (the
    job's) reads them: the same flags in any order give the same, and so do defaults that change (a new flag, HOME)."""
    values = vars(parser.parse_args(argv))
    defaults = {action.dest: _parsed_default(action) for action in parser._actions}  # noqa: SLF001 - argparse's own
    return {name: repr(value) for name, value in sorted(values.items())
            if name in defaults and value != defaults[name]}  # (not the parser's own bookkeeping)


def _parsed_default(action):
    """Returns the value argparse gives `action`'s dest when its flag is not given (a string default goes through
    its type)."""
    if isinstance(action.default, str) and action.type is not None:
        try:
            return action.type(action.default)
        except (argparse.ArgumentTypeError, TypeError, ValueError):
            return action.default
    return action.default


def measure(parsed):
    """Runs the measurement and prints the table."""
    from benchmark import generalisation  # noqa: PLC0415
    from pipeline.machine import describe_cpu  # noqa: PLC0415
    args, task, job_argv = parsed
    value = {name: default if getattr(args, name) is None else getattr(args, name)
             for name, default in ARM_DEFAULTS.items()}
    arms = generalisation.build_arms(value["ema_decay"], value["label_smoothing"], value["mixup"], value["cutmix"],
                                     value["tta"], value["weight_decay"], value["sgd_rate"], args.arms)
    header = (f"{args.name or task.name}: `{shlex.join(['scripts/measure_generalisation.py', *sys.argv[1:]])}`; "
              f"seeds {','.join(map(str, args.seeds))}; {describe_cpu()}")
    with generalisation.holding_output(args.output):
        generalisation.claim_output(args.output, job_argv, arms, given_settings(build_job_parser(task), job_argv))
        rows = generalisation.measure(f"train_{task.name}.py", job_argv, arms, args.seeds, args.output,
                                      progress=lambda line: print(line, flush=True))
        print(generalisation.write_outputs(rows, generalisation.summarise(rows, arms), arms, args.output, header))


if __name__ == "__main__":
    sys.exit(run_command(build_parser(), measure, parse=_parse))
