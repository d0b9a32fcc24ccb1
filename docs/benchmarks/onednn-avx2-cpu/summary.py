"""Paired ratios of ab.sh's invocations: for each row (job, engine, precision, batch), images/sec with
TF_ENABLE_ONEDNN_OPTS=1 over =0 in each pair, their median, min and max, and each side's mean.

    python docs/benchmarks/onednn-avx2-cpu/summary.py OUT
"""
import collections
import glob
import json
import os
import statistics
import sys


def rows(folder):
    with open(os.path.join(folder, "results.json")) as f:
        return {(r["engine"], r["precision"], r["global_batch_size"]): r["images_per_sec_span"]
                for r in json.load(f)["rows"]}


def main(out):
    figures = collections.defaultdict(dict)  # (job, engine, precision, batch) -> {(opts, pair): images/sec}
    for folder in sorted(glob.glob(os.path.join(out, "*-opts*-*"))):
        if not os.path.isfile(os.path.join(folder, "results.json")):
            continue
        job, opts, pair = os.path.basename(folder).rsplit("-", 2)
        for key, value in rows(folder).items():
            figures[(job,) + key][(opts, pair)] = value
    print("| job | engine | precision | batch | oneDNN off, img/s | oneDNN on, img/s | on / off, per pair | median |")
    print("|---|---|---|---|---|---|---|---|")
    for key, by_run in sorted(figures.items()):
        pairs = sorted({pair for _, pair in by_run})
        ratios = [by_run[("opts1", p)] / by_run[("opts0", p)] for p in pairs
                  if ("opts1", p) in by_run and ("opts0", p) in by_run]
        off = statistics.mean(v for (o, _), v in by_run.items() if o == "opts0")
        on = statistics.mean(v for (o, _), v in by_run.items() if o == "opts1")
        print(f"| {' | '.join(map(str, key))} | {off:,.1f} | {on:,.1f} | {', '.join(f'{r:.2f}' for r in ratios)} "
              f"| **{statistics.median(ratios):.2f}** |")


if __name__ == "__main__":
    main(sys.argv[1])
