#!/usr/bin/env python
"""Lay out the 129 real OCT scans shipped with the project (acquisition/data/oct-sample) as an
OCT2017 tree (train/ and test/ class folders), a --data-dir that train_oct.py, inspect_input.py
and benchmark.py can use offline. Far too small to train a useful model: for smoke runs."""
import os
import shlex
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pipeline.cli import run_command  # noqa: E402
from pipeline.errors import FlagError  # noqa: E402
from pipeline.flag_types import ArgumentParser, HelpFormatter, positive_int  # noqa: E402


def build_parser():
    """Returns the parser: source, output folder and the test share."""
    parser = ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--source", default=None,
                        help="folder with CNV, DME, DRUSEN and NORMAL folders of JPEG scans (default: "
                             "acquisition/data/oct-sample, shipped with the project)")
    parser.add_argument("--out", required=True, help="folder to write the OCT2017 tree into (as <out>/OCT2017)")
    parser.add_argument("--test-per-class", type=positive_int, default=6,
                        help="scans of each class (the last by name) that go to test/")
    return parser


def make_sample(args):
    from acquisition import retinal_oct
    root = os.path.join(args.out, retinal_oct.CLEAN_ROOT)
    if os.path.exists(root):
        raise FlagError(f"--out {args.out} already holds {root}; pass another --out, or remove it first")
    try:
        num_train, num_test = retinal_oct.make_sample_tree(root, args.source or retinal_oct.SHIPPED_SAMPLE_DIR,
                                                           args.test_per_class)
    except retinal_oct.SampleTooSmall as e:
        raise FlagError(f"argument --test-per-class: {e}") from None  # (a bound only the source gives: exit 2)
    print(f"wrote {num_train} training and {num_test} test scans to {root}; train with --data-dir {shlex.quote(args.out)}")


if __name__ == "__main__":
    sys.exit(run_command(build_parser(), make_sample))
