#!/usr/bin/env python
"""Summarise compare.sh's results.csv: each model's test accuracy per dataset (mean, min, max over the
seeds, and its seconds), and the paired differences against small_cnn, then keras_scratch, as markdown tables.
Usage: python docs/benchmarks/scratch-models-cpu/summarise.py OUT_DIR/results.csv [OUT_DIR/results-e60.csv]"""
import csv
import statistics
import sys
from collections import defaultdict


def read(paths):
    """Returns {(data, size): {model: {seed: (accuracy, seconds)}}} from compare.sh's results files (a
    model trained for other than 20 epochs is named with its epochs)."""
    table = defaultdict(lambda: defaultdict(dict))
    for path in paths:
        with open(path) as f:
            for row in csv.DictReader(f):
                epochs = row.get("epochs", "20")
                model = row["model"] if epochs == "20" else f"{row['model']}, {epochs} epochs"
                table[(row["data"], row["size"])][model][row["seed"]] = (float(row["eval_accuracy"]),
                                                                         float(row["train_seconds"]))
    return table


def rows(table, baseline="small_cnn"):
    """Returns the markdown rows: per dataset and model, accuracy mean [min, max], mean seconds, and the
    mean paired difference against `baseline` with the count of seeds where the model was ahead."""
    out = [f"| data | model | seeds | test accuracy, mean [min, max] | vs {baseline}, paired mean (ahead in) "
           "| train s (mean) |", "|---|---|---|---|---|---|"]
    for (data, size), models in table.items():
        for model, runs in models.items():
            accuracy = [a for a, _ in runs.values()]
            paired = [runs[s][0] - models[baseline][s][0] for s in runs if s in models.get(baseline, {})]
            versus = "-" if model == baseline or not paired else \
                f"{statistics.mean(paired):+.3f} ({sum(d > 0 for d in paired)}/{len(paired)})"
            out.append(f"| {data} {size} px | {model} | {len(runs)} | {statistics.mean(accuracy):.3f} "
                       f"[{min(accuracy):.3f}, {max(accuracy):.3f}] | {versus} | "
                       f"{statistics.mean(s for _, s in runs.values()):.0f} |")
    return out


if __name__ == "__main__":
    for against in ("small_cnn", "keras_scratch"):
        print("\n".join(rows(read(sys.argv[1:]), against)) + "\n")
