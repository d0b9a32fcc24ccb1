#!/usr/bin/env python
"""Probe this machine's peak FLOP/s again (the figure MFU is read against) and print each shape's;
the cache keeps the highest figure ever probed. Run it on a quiet machine."""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from models import GRAPH_REWRITE_PRECISIONS, PRECISIONS  # noqa: E402
from pipeline.cli import run_command  # noqa: E402
from pipeline.flag_types import ArgumentParser, positive_float, positive_int  # noqa: E402


TYPES = [name for name in PRECISIONS if name not in GRAPH_REWRITE_PRECISIONS]  # the types a peak is probed in


def precisions(text):
    """argparse type: comma-separated precisions."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in TYPES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown precision {', '.join(unknown) or text!r}; use "
                                         f"{', '.join(TYPES)}")
    return names


def build_parser():
    """Returns the parser: the precisions to probe and the time each may take."""
    parser = ArgumentParser(description=__doc__)
    parser.add_argument("--precision", type=precisions, default=["fp32"],
                        help="comma-separated, from: " + ", ".join(TYPES))
    parser.add_argument("--seconds", type=positive_float, default=6.0, help="time budget per precision")
    parser.add_argument("--repeats", type=positive_int, default=3, help="probes per precision; the best counts")
    return parser


def probe(args):
    """Probes each precision `--repeats` times on the CPU, updates the cache and prints the figures."""
    from pipeline import peak  # imports TensorFlow: once the arguments are good
    from pipeline.machine import read_cpuinfo
    info = read_cpuinfo()
    name, cores = peak.cpu_identity(info), os.cpu_count()
    print(f"{name}, {cores} cores; cache: {peak.cache_path()}")
    for precision in args.precision:
        for repeat in range(args.repeats):
            figures = peak.probe_shapes(precision, budget_seconds=args.seconds)
            print(f"{precision} probe {repeat + 1}: " + ", ".join(f"{s} {f / 1e9:.0f}" for s, f in figures)
                  + " GFLOP/s")
            best = max(figures, key=lambda figure: figure[1])
            peak.measured_peak(precision, name, cores, refresh=True, probe_fn=lambda *_: (best[1], best[0]))
        flops, detail = peak.measured_peak(precision, name, cores, probe=False)
        nominal, described = peak.nominal_cpu_peak(precision, info, cores)
        print(f"{precision} peak: {flops / 1e9:.0f} GFLOP/s ({detail}); nominal "
              + (f"{nominal / 1e9:.0f} GFLOP/s, {described}" if nominal else described))
    return 0


if __name__ == "__main__":
    sys.exit(run_command(build_parser(), probe))
