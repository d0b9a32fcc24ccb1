#!/usr/bin/env python
"""Split a t10k-only Fashion-MNIST sample (by default the 1,000 images shipped with the
project) into train and test IDX files, making a --data-dir that train_fashion.py can use."""
import os
import shlex
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pipeline.cli import run_command  # noqa: E402
from pipeline.errors import FlagError  # noqa: E402
from pipeline.flag_types import ArgumentParser, HelpFormatter, int_in_range, positive_int  # noqa: E402


def build_parser():
    """Returns the parser: source, output folder and the split."""
    parser = ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--source", default=None,
                        help="folder with t10k-images/labels IDX .gz files (default: acquisition/data/"
                             "fashion-mnist-sample, shipped with the project)")
    parser.add_argument("--out", required=True, help="folder to write the four official IDX files into")
    parser.add_argument("--train", type=positive_int, default=800, help="images that go to the training split")
    parser.add_argument("--seed", type=int_in_range(0, 2 ** 31 - 1), default=0, help="seed of the random split")
    return parser


def make_sample(args):
    from acquisition import fashion_mnist  # imports TensorFlow: only once the arguments are good
    from acquisition.files import present
    there = present(args.out, [name for names in fashion_mnist.FILES.values() for name in names])
    if there:
        more = f" and {len(there) - 1} more" if len(there) > 1 else ""
        raise FlagError(f"--out {args.out} already holds {there[0]}{more}, which this would overwrite; pass another "
                        "--out, or move them away first")
    try:
        num_train, num_test = fashion_mnist.split_sample(args.source or fashion_mnist.SHIPPED_SAMPLE_DIR,
                                                         args.out, args.train, args.seed)
    except ValueError as e:
        raise FlagError(f"argument --train: {e}") from None  # (a bound only the source's size gives: exit 2)
    print(f"wrote {num_train} training and {num_test} test images to {args.out}; train with\n"
          f"  scripts/in_venv.sh python scripts/train_fashion.py --data-dir {shlex.quote(args.out)} {recipe_flags()}\n"
          "(the shipped sample's recipe: the defaults, made for the full dataset's 60,000 images, learn next to "
          "nothing from so few)")


def recipe_flags():
    """Returns the flags of the shipped sample's recipe (pipeline.tasks.fashion_dataset.SAMPLE_RECIPE), which a
    run applies by itself only when it falls back to the sample."""
    from pipeline.tasks.fashion_dataset import SAMPLE_RECIPE
    return " ".join(f"--{name.replace('_', '-')} {value:g}" if isinstance(value, float) else
                    f"--{name.replace('_', '-')} {value}" for name, value in SAMPLE_RECIPE.items() if value is not None)


if __name__ == "__main__":
    sys.exit(run_command(build_parser(), make_sample))
