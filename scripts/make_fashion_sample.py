#!/usr/bin/env python
"""Split a t10k-only Fashion-MNIST sample (such as ../shared/data/fashion-mnist-sample)
into train and test IDX files, making a --data-dir that train_fashion.py can use."""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pipeline.errors import USER_ERRORS  # noqa: E402
from pipeline.tasks.fashion import split_sample  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--source", required=True, help="folder with t10k-images/labels IDX .gz files")
    parser.add_argument("--out", required=True, help="folder to write the four official IDX files into")
    parser.add_argument("--train", type=int, default=800, help="images that go to the training split")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random split")
    args = parser.parse_args(argv)
    try:
        num_train, num_test = split_sample(args.source, args.out, args.train, args.seed)
    except (ValueError,) + USER_ERRORS as e:
        parser.exit(1, f"{parser.prog}: error: {e}\n")
    print(f"wrote {num_train} training and {num_test} test images to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
