#!/usr/bin/env python
"""Which oneDNN kernels a benchmark's timed steps run, how long, how near the peak; see --help."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmark.kernel_profile import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
