#!/usr/bin/env python
"""Measure training and input throughput over replicas and batch sizes; see --help."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmark.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
