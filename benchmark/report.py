"""Benchmark outputs: results.csv and results.json (a row per measurement), report.md, plots."""
import collections
import csv
import json
import os
import statistics

COLUMNS = ("task", "mode", "engine", "data", "replicas", "per_replica_batch_size", "global_batch_size", "repeat",
           "warm_up_steps", "timed_steps", "images_per_sec", "images_per_sec_std", "step_time_mean",
           "cpu_seconds_per_image", "total_seconds", "epoch_seconds", "scaling_efficiency", "devices",
           "tensorflow_version", "host_cpus")


def _key(row, *fields):
    return tuple(row[f] for f in fields)


def add_scaling_efficiency(rows):
    """Sets each training row's scaling_efficiency: its images/sec over (replicas x the mean
    images/sec of the same engine, data and per-replica batch on 1 replica); None without one."""
    single = collections.defaultdict(list)
    for row in rows:
        if row["mode"] == "train" and row["replicas"] == 1:
            single[_key(row, "engine", "data", "per_replica_batch_size")].append(row["images_per_sec"])
    for row in rows:
        base = single.get(_key(row, "engine", "data", "per_replica_batch_size"))
        row["scaling_efficiency"] = (row["images_per_sec"] / (row["replicas"] * statistics.mean(base))
                                     if row["mode"] == "train" and base else None)
    return rows


def summarize(rows):
    """Returns one dict per configuration: mean and spread (min..max) of images/sec and CPU per image."""
    groups = collections.OrderedDict()
    for row in rows:
        groups.setdefault(_key(row, "mode", "engine", "data", "replicas", "per_replica_batch_size"), []).append(row)
    summary = []
    for (mode, engine, data, replicas, batch), group in groups.items():
        rates = [r["images_per_sec"] for r in group]
        efficiencies = [r["scaling_efficiency"] for r in group if r.get("scaling_efficiency") is not None]
        summary.append({
            "mode": mode, "engine": engine, "data": data, "replicas": replicas, "per_replica_batch_size": batch,
            "global_batch_size": group[0]["global_batch_size"], "repeats": len(group),
            "images_per_sec": statistics.mean(rates), "images_per_sec_min": min(rates),
            "images_per_sec_max": max(rates),
            "cpu_ms_per_image": 1000 * statistics.mean(r["cpu_seconds_per_image"] for r in group),
            "epoch_seconds": (statistics.mean(r["epoch_seconds"] for r in group)
                              if group[0]["epoch_seconds"] else None),
            "scaling_efficiency": statistics.mean(efficiencies) if efficiencies else None,
        })
    return summary


def ratios(summary):
    """Returns (label, ratio of images/sec, ratio of CPU per image) comparisons measured in this run:
    Estimator / Keras, real / synthetic data, and each input variant against the design's recipe."""
    by_key = {(s["mode"], s["engine"], s["data"], s["replicas"], s["per_replica_batch_size"]): s for s in summary}
    found = []
    for (mode, engine, data, replicas, batch), s in by_key.items():
        where = f"{replicas} replica(s), batch {batch}/replica"
        if mode == "train" and engine == "estimator":
            keras = by_key.get(("train", "keras", data, replicas, batch))
            if keras:
                found.append((f"Estimator / Keras fit, {data} data, {where}",
                              s["images_per_sec"] / keras["images_per_sec"], None))
            if data == "real":
                synthetic = by_key.get(("train", "estimator", "synthetic", replicas, batch))
                if synthetic:
                    found.append((f"real / synthetic data, Estimator, {where}",
                                  s["images_per_sec"] / synthetic["images_per_sec"], None))
        if mode == "input" and data != "design":
            design = by_key.get(("input", "input", "design", replicas, batch))
            if design:
                found.append((f"input '{data}' / design recipe, batch {batch}",
                              s["images_per_sec"] / design["images_per_sec"],
                              design["cpu_ms_per_image"] / s["cpu_ms_per_image"]))
    return found


def _fmt(value, pattern):
    return "" if value is None else pattern.format(value)


def markdown_report(summary, header):
    """Returns report.md: the header, a table of configurations and the ratios."""
    lines = [f"# Benchmark: {header}", "",
             "| mode | engine | data | replicas | batch/replica | global batch | images/sec (mean) | min..max "
             "| CPU ms/image | full epoch s | scaling eff. | repeats |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in summary:
        lines.append(
            f"| {s['mode']} | {s['engine']} | {s['data']} | {s['replicas']} | {s['per_replica_batch_size']} "
            f"| {s['global_batch_size']} | {s['images_per_sec']:.1f} "
            f"| {s['images_per_sec_min']:.1f}..{s['images_per_sec_max']:.1f} | {s['cpu_ms_per_image']:.2f} "
            f"| {_fmt(s['epoch_seconds'], '{:.1f}')} | {_fmt(s['scaling_efficiency'], '{:.2f}')} | {s['repeats']} |")
    found = ratios(summary)
    if found:
        lines += ["", "Ratios (same invocation, means over repeats):", "",
                  "| comparison | images/sec ratio | CPU per image: baseline / this |", "|---|---|---|"]
        lines += [f"| {label} | {r:.2f} | {_fmt(c, '{:.2f}')} |" for label, r, c in found]
    return "\n".join(lines) + "\n"


def plot(summary, out_dir, title=""):
    """Writes throughput.png (images/sec vs replicas) and time.png (epoch time vs replicas), one line
    per engine, data source and batch size; returns the paths written (none for input-only runs)."""
    train = [s for s in summary if s["mode"] == "train"]
    if not train:
        return []
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    lines = collections.defaultdict(list)
    for s in train:
        lines[(s["engine"], s["data"], s["per_replica_batch_size"])].append(s)
    paths = []
    for name, field, label in (("throughput.png", "images_per_sec", "images/sec (all replicas)"),
                               ("time.png", "epoch_seconds",
                                "time per epoch of the full training set, s\n(derived from images/sec)")):
        figure, axes = plt.subplots(figsize=(7, 4.5))
        for (engine, data, batch), points in sorted(lines.items()):
            points = sorted(points, key=lambda s: s["replicas"])
            axes.plot([p["replicas"] for p in points], [p[field] for p in points], marker="o",
                      label=f"{engine}, {data}, batch {batch}/replica")
        axes.set_xlabel("replicas")
        axes.set_ylabel(label)
        axes.set_xticks(sorted({s["replicas"] for s in train}))
        axes.set_ylim(bottom=0)
        axes.set_title(title, fontsize=9)
        axes.grid(alpha=0.3)
        axes.legend(fontsize=8)
        figure.tight_layout()
        paths.append(os.path.join(out_dir, name))
        figure.savefig(paths[-1], dpi=110)
        plt.close(figure)
    return paths


def write_outputs(rows, out_dir, header):
    """Writes results.csv, results.json, report.md and the plots into `out_dir`; returns report.md's text."""
    os.makedirs(out_dir, exist_ok=True)
    add_scaling_efficiency(rows)
    with open(os.path.join(out_dir, "results.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    with open(os.path.join(out_dir, "results.json"), "w") as f:
        json.dump({"header": header, "rows": rows}, f, indent=2)
    summary = summarize(rows)
    report = markdown_report(summary, header)
    with open(os.path.join(out_dir, "report.md"), "w") as f:
        f.write(report)
    plot(summary, out_dir, title=header.split(";")[0])
    return report
