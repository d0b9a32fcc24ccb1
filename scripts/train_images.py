#!/usr/bin/env python
"""Train an image classifier on a folder of class folders (DIR/<class>/<image>) through an Estimator; see --help."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pipeline.cli import train_main  # noqa: E402
from pipeline.tasks.images import TASK  # noqa: E402

if __name__ == "__main__":
    sys.exit(train_main(TASK))
