#!/usr/bin/env python
"""Run a training command as a TF_CONFIG cluster on this machine (127.0.0.1, free ports).

  python scripts/launch_local_cluster.py --workers 2 -- \\
      python scripts/train_fashion.py --strategy multi_worker_mirrored --model-dir runs/cluster

starts a chief and 2 workers, each with its own TF_CONFIG, and prefixes their
output with the task's name. It stops every process it started when one fails
or on Ctrl-C, and exits non-zero when any task failed.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from cluster.launcher import LocalCluster  # noqa: E402
from pipeline.cli import run_command  # noqa: E402
from pipeline.flags import non_negative_int  # noqa: E402


def build_parser():
    """Returns the parser of the launcher's own flags (those before --)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     usage="%(prog)s [--workers N] [--ps N] [--evaluator] -- COMMAND ...")
    parser.add_argument("--workers", type=non_negative_int, default=1, help="worker tasks besides the chief")
    parser.add_argument("--ps", type=non_negative_int, default=0,
                        help="parameter-server tasks (needed by --strategy parameter_server)")
    parser.add_argument("--evaluator", action="store_true",
                        help="add an evaluator task that evaluates each new checkpoint")
    return parser


def parse(parser, argv):
    """Returns the launcher's args, with `command`: what follows --."""
    argv = sys.argv[1:] if argv is None else argv
    split = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:split])
    args.command = argv[split + 1:]
    if not args.command:
        parser.error("give the training command after --")
    return args


def launch(args):
    return LocalCluster(args.command, args.workers, args.ps, args.evaluator).run()


if __name__ == "__main__":
    sys.exit(run_command(build_parser(), launch, parse=parse))
