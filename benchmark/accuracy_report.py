"""Time-to-accuracy outputs: results.csv and results.json (a row per measurement; the JSON also holds
each one's evaluations), report.md, time_to_accuracy.png and accuracy.png."""
import collections
import os
import statistics
import textwrap

from benchmark.plots import pyplot
from benchmark.report import _fmt, write_tables

COLUMNS = ("task", "mode", "engine", "data", "precision", "conv_gradients", "replicas", "per_replica_batch_size",
           "global_batch_size", "repeat", "seed", "target_accuracy", "reached", "stopped_because", "seconds_to_accuracy",
           "steps_to_accuracy", "images_to_accuracy", "epochs_to_accuracy", "evaluations_to_accuracy",
           "validation_seconds", "best_validation_accuracy", "final_step", "budget_steps", "time_budget_seconds",
           "train_seconds", "images_per_sec", "cpu_seconds_per_image", "learning_rate", "train_examples",
           "validation_examples", "evaluation_cadence", "load_average_at_start", "load_average_at_end", "devices",
           "tensorflow_version", "host_cpus")
_CONFIG = ("engine", "data", "precision", "replicas", "per_replica_batch_size")


def _mean(values):
    values = [v for v in values if v is not None]
    return statistics.mean(values) if values else None


def summarize(rows):
    """Returns one dict per configuration: how many repeats reached the target and, over those, the mean
    and range of the seconds to it, the mean steps, images, epochs and evaluations to it and the share of
    the seconds spent evaluating; images/sec over every repeat."""
    groups = collections.OrderedDict()
    for row in rows:
        groups.setdefault(tuple(row[f] for f in _CONFIG), []).append(row)
    summary = []
    for key, group in groups.items():
        reached = [r for r in group if r["reached"]]
        seconds = [r["seconds_to_accuracy"] for r in reached]
        summary.append({
            **dict(zip(_CONFIG, key)), "global_batch_size": group[0]["global_batch_size"],
            "target_accuracy": group[0]["target_accuracy"], "repeats": len(group), "reached": len(reached),
            "seconds_to_accuracy": _mean(seconds), "seconds_min": min(seconds, default=None),
            "seconds_max": max(seconds, default=None),
            "steps_to_accuracy": _mean(r["steps_to_accuracy"] for r in reached),
            "images_to_accuracy": _mean(r["images_to_accuracy"] for r in reached),
            "epochs_to_accuracy": _mean(r["epochs_to_accuracy"] for r in reached),
            "evaluations_to_accuracy": _mean(r["evaluations_to_accuracy"] for r in reached),
            "validation_share": _mean(r["validation_seconds"] / r["seconds_to_accuracy"] for r in reached),
            "seconds_outside_evaluation": _mean(r["seconds_to_accuracy"] - r["validation_seconds"] for r in reached),
            "images_per_sec": _mean(r["images_per_sec"] for r in group),
            "best_validation_accuracy": max((r["best_validation_accuracy"] for r in group
                                             if r["best_validation_accuracy"] is not None), default=None),
            "load_average": _mean(r["load_average_at_start"] for r in group),
        })
    return summary


def _label(s):
    return f"{s['precision']}, {s['replicas']} replica(s), batch {s['per_replica_batch_size']}/replica"


def ratios(rows, summary):
    """Returns (label, ratio of mean seconds to accuracy, range of the same ratio per seed, the ratio of
    the seconds outside evaluations, ratio of images/sec, ratio of images to accuracy) for bf16 and fp16
    against fp32, and each replica count against 1, at the same other settings: only configurations whose
    every repeat reached the target. A time ratio above 1 means the second configuration reaches the
    target sooner."""
    complete = {tuple(s[f] for f in _CONFIG): s for s in summary if s["reached"] == s["repeats"]}
    by_seed = {(tuple(r[f] for f in _CONFIG), r["seed"]): r for r in rows if r["reached"]}
    found = []
    for key, s in complete.items():
        engine, data, prec, replicas, batch = key
        bases = []
        if prec != "fp32":
            bases.append((engine, data, "fp32", replicas, batch))
        if replicas != 1:
            bases.append((engine, data, prec, 1, batch))
        for base_key in bases:
            base = complete.get(base_key)
            if not base:
                continue
            paired = [by_seed[base_key, seed]["seconds_to_accuracy"] / by_seed[key, seed]["seconds_to_accuracy"]
                      for (k, seed) in by_seed if k == key and (base_key, seed) in by_seed]
            found.append((f"{_label(base)} / {_label(s)}", base["seconds_to_accuracy"] / s["seconds_to_accuracy"],
                          (min(paired), max(paired)) if paired else None,
                          base["seconds_outside_evaluation"] / s["seconds_outside_evaluation"],
                          s["images_per_sec"] / base["images_per_sec"] if s["images_per_sec"] and base["images_per_sec"]
                          else None, base["images_to_accuracy"] / s["images_to_accuracy"]))
    return found


def markdown_report(rows, summary, header):
    """Returns report.md: the header, what the time covers, a table of configurations, every
    measurement and the ratios."""
    target = summary[0]["target_accuracy"] if summary else None
    lines = [f"# Time to accuracy: {header}", "",
             f"Seconds from the start of each configuration (model and Estimator built, graph, session, every "
             f"training step, checkpoint and evaluation) to the end of the first evaluation whose validation "
             f"accuracy reached {_fmt(target, '{:g}')}; steps, images and epochs of images trained by then. "
             "Means over the repeats that reached it; images/sec (training steps only, evaluations and "
             "checkpoints left out) over all repeats.", "",
             "| precision | replicas | batch/replica | global batch | reached | seconds to accuracy (mean) | min..max "
             "| steps | images | epochs | evaluations | evaluating, share of the time | seconds outside evaluations "
             "| images/sec | best accuracy | load average |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in summary:
        lines.append(
            f"| {s['precision']} | {s['replicas']} | {s['per_replica_batch_size']} | {s['global_batch_size']} "
            f"| {s['reached']} of {s['repeats']} | {_fmt(s['seconds_to_accuracy'], '{:.1f}') or 'not reached'} "
            f"| {_fmt(s['seconds_min'], '{:.1f}')}..{_fmt(s['seconds_max'], '{:.1f}')} "
            f"| {_fmt(s['steps_to_accuracy'], '{:.0f}')} | {_fmt(s['images_to_accuracy'], '{:.0f}')} "
            f"| {_fmt(s['epochs_to_accuracy'], '{:.1f}')} | {_fmt(s['evaluations_to_accuracy'], '{:.1f}')} "
            f"| {_fmt(s['validation_share'], '{:.0%}')} | {_fmt(s['seconds_outside_evaluation'], '{:.1f}')} "
            f"| {_fmt(s['images_per_sec'], '{:.0f}')} "
            f"| {_fmt(s['best_validation_accuracy'], '{:.3f}')} | {_fmt(s['load_average'], '{:.1f}')} |")
    lines += ["", "Every measurement:", "",
              "| precision | replicas | batch/replica | seed | outcome | seconds | step | epochs | evaluating s "
              "| images/sec | load at start..end |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        outcome = "reached" if r["reached"] else (f"not reached ({r['stopped_because']}, best "
                                                   f"{_fmt(r['best_validation_accuracy'], '{:.3f}') or 'none'} "
                                                   f"by step {r['final_step']})")
        lines.append(f"| {r['precision']} | {r['replicas']} | {r['per_replica_batch_size']} | {r['seed']} | {outcome} "
                     f"| {_fmt(r['seconds_to_accuracy'], '{:.1f}')} | {_fmt(r['steps_to_accuracy'], '{}')} "
                     f"| {_fmt(r['epochs_to_accuracy'], '{:.1f}')} | {r['validation_seconds']:.1f} "
                     f"| {_fmt(r['images_per_sec'], '{:.0f}')} "
                     f"| {r['load_average_at_start']:.1f}..{r['load_average_at_end']:.1f} |")
    found = ratios(rows, summary)
    if found:
        lines += ["", "Ratios (same invocation; configurations whose every repeat reached the target):", "",
                  "| baseline / configuration | seconds to accuracy: baseline / this | per seed, min..max "
                  "| seconds outside evaluations: baseline / this | images/sec: this / baseline "
                  "| images to accuracy: baseline / this |", "|---|---|---|---|---|---|"]
        lines += [f"| {label} | {r:.2f} | {_fmt(p and p[0], '{:.2f}')}..{_fmt(p and p[1], '{:.2f}')} "
                  f"| {o:.2f} | {_fmt(t, '{:.2f}')} | {i:.2f} |" for label, r, p, o, t, i in found]
    return "\n".join(lines) + "\n"


def plot(rows, summary, out_dir, title=""):
    """Writes time_to_accuracy.png (each configuration's seconds to the target: the mean's bar, split into
    the seconds outside evaluations and those evaluating, each repeat a dot, a repeat that did not reach it
    an x at the top) and accuracy.png (validation accuracy against seconds from the start and against
    epochs of images, one line per measurement, the target dashed); returns the paths written."""
    if not summary:
        return []
    plt = pyplot()
    title = textwrap.fill(title, 80)
    keys = [tuple(s[f] for f in _CONFIG) for s in summary]
    colors = {key: f"C{i % 10}" for i, key in enumerate(keys)}
    figure, axes = plt.subplots(figsize=(max(6, 1.6 * len(summary) + 2), 4.5))
    top = max([r["train_seconds"] for r in rows] + [1.0])
    for i, (key, s) in enumerate(zip(keys, summary)):
        outside = s["seconds_outside_evaluation"] or 0
        axes.bar(i, outside, color=colors[key], alpha=0.6, label="outside evaluations" if i == 0 else None)
        axes.bar(i, (s["seconds_to_accuracy"] or 0) - outside, bottom=outside, color=colors[key], alpha=0.25,
                 hatch="//", label="evaluating" if i == 0 else None)
        group = [r for r in rows if tuple(r[f] for f in _CONFIG) == key]
        axes.scatter([i] * len([r for r in group if r["reached"]]),
                     [r["seconds_to_accuracy"] for r in group if r["reached"]], color="black", zorder=3, s=12)
        missed = [r for r in group if not r["reached"]]
        if missed:
            axes.scatter([i] * len(missed), [top] * len(missed), marker="x", color="red", zorder=3)
            axes.annotate(f"{len(missed)} not reached", (i, top), ha="center", va="bottom", fontsize=7, color="red")
    axes.set_xticks(range(len(summary)))
    axes.set_xticklabels([_label(s) for s in summary], fontsize=7, rotation=20, ha="right")
    axes.set_ylabel(f"seconds to validation accuracy {summary[0]['target_accuracy']:g}\n(evaluations included)")
    axes.set_ylim(bottom=0, top=1.12 * top)
    axes.set_title(title, fontsize=9)
    axes.grid(alpha=0.3, axis="y")
    axes.legend(fontsize=7)
    figure.tight_layout()
    paths = [os.path.join(out_dir, "time_to_accuracy.png")]
    figure.savefig(paths[-1], dpi=110)
    plt.close(figure)

    figure, panels = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    for row in rows:
        key = tuple(row[f] for f in _CONFIG)
        accuracy = [e["validation_accuracy"] for e in row["evaluations"]]
        epochs = [e["step"] * row["global_batch_size"] / row["train_examples"] for e in row["evaluations"]]
        label = _label(dict(zip(_CONFIG, key))) if row["repeat"] == 0 else None
        panels[0].plot([e["seconds"] for e in row["evaluations"]], accuracy, color=colors[key], marker=".",
                       alpha=0.8, label=label)
        panels[1].plot(epochs, accuracy, color=colors[key], marker=".", alpha=0.8)
    for axes, xlabel in zip(panels, ("seconds from the configuration's start", "epochs of training images")):
        axes.axhline(summary[0]["target_accuracy"], color="gray", linestyle="--", linewidth=1)
        axes.set_xlabel(xlabel)
        axes.set_xlim(left=0)
        axes.grid(alpha=0.3)
    panels[0].set_ylabel("validation accuracy (at each evaluation)")
    panels[0].legend(fontsize=7)
    figure.suptitle(title, fontsize=9)
    figure.tight_layout()
    paths.append(os.path.join(out_dir, "accuracy.png"))
    figure.savefig(paths[-1], dpi=110)
    plt.close(figure)
    return paths


def write_outputs(rows, out_dir, header):
    """Writes results.csv, results.json, report.md and the plots into `out_dir`; returns report.md's text."""
    summary = summarize(rows)
    # Each row's evaluations go to results.json only.
    report = write_tables(rows, out_dir, header, COLUMNS, markdown_report(rows, summary, header))
    plot(rows, summary, out_dir, title=header.split(";")[0])
    return report
