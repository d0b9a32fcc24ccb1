#!/usr/bin/env python
"""Show what a job's training input feeds the model before training on it; see --help."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from inspection.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
