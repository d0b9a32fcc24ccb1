#!/usr/bin/env python
"""Compare finished runs side by side: one table of their results.json (settings, throughput,
MFU, best validation and test accuracy). Each DIR is a model dir, or a folder of model dirs;
any tf.io.gfile path (local, gs://...) works."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pipeline.cli import run_command  # noqa: E402
from pipeline.flag_types import ArgumentParser, HelpFormatter  # noqa: E402


def build_parser():
    """Returns the parser: the model dirs and the table's format."""
    parser = ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("dirs", nargs="+", metavar="DIR", help="model dir of a finished run, or a folder of them")
    parser.add_argument("--csv", action="store_true", help="print CSV instead of a markdown table")
    return parser


def compare(args):
    """Prints the table of the runs found in args.dirs."""
    from reporting import compare as compare_lib  # imports TensorFlow: once the arguments are good
    rows = compare_lib.table_rows(compare_lib.find_runs(args.dirs))
    print(compare_lib.as_csv(rows) if args.csv else compare_lib.as_markdown(rows), end="" if args.csv else "\n")


if __name__ == "__main__":
    sys.exit(run_command(build_parser(), compare))
