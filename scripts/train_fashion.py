#!/usr/bin/env python
"""Train the small CNN on Fashion-MNIST through an Estimator; see --help."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pipeline.cli import train_main  # noqa: E402
from pipeline.tasks.fashion import TASK  # noqa: E402

if __name__ == "__main__":
    sys.exit(train_main(TASK))
