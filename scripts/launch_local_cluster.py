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

from pipeline.launcher import LocalCluster  # noqa: E402


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    split = argv.index("--") if "--" in argv else len(argv)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     usage="%(prog)s [--workers N] [--ps N] [--evaluator] -- COMMAND ...")
    parser.add_argument("--workers", type=int, default=1, help="worker tasks besides the chief")
    parser.add_argument("--ps", type=int, default=0,
                        help="parameter-server tasks (needed by --strategy parameter_server)")
    parser.add_argument("--evaluator", action="store_true",
                        help="add an evaluator task that evaluates each new checkpoint")
    args = parser.parse_args(argv[:split])
    command = argv[split + 1:]
    if not command:
        parser.error("give the training command after --")
    if args.workers < 0 or args.ps < 0:
        parser.error("--workers and --ps must be 0 or more")
    return LocalCluster(command, args.workers, args.ps, args.evaluator).run()


if __name__ == "__main__":
    sys.exit(main())
