"""Benchmark outputs: results.csv and results.json (a row per measurement), report.md, plots."""
import collections
import csv
import json
import os
import random
import statistics

from benchmark import plots

COLUMNS = ("task", "mode", "engine", "data", "precision", "conv_gradients", "replicas", "per_replica_batch_size",
           "global_batch_size", "repeat", "warm_up_steps", "timed_steps", "images_per_sec", "images_per_sec_std",
           "images_per_sec_median", "images_per_sec_span", "step_time_mean",
           "cpu_seconds_per_image", "total_seconds", "epoch_seconds", "scaling_efficiency", "train_flops_per_image",
           "peak_flops", "peak_source", "mfu", "devices",
           "tensorflow_version", "host_cpus")
FEW_TIMED_STEPS = 10  # fewer, and one slow step moves a figure


def _key(row, *fields):
    return tuple(row[f] for f in fields)


def add_scaling_efficiency(rows):
    """Sets each training row's scaling_efficiency: its images/sec over (replicas x the mean
    images/sec of the same engine, data and per-replica batch on 1 replica); None without one."""
    single = collections.defaultdict(list)
    for row in rows:
        if row["mode"] == "train" and row["replicas"] == 1:
            single[_key(row, "engine", "data", "precision", "per_replica_batch_size")].append(row["images_per_sec"])
    for row in rows:
        base = single.get(_key(row, "engine", "data", "precision", "per_replica_batch_size"))
        row["scaling_efficiency"] = (row["images_per_sec"] / (row["replicas"] * statistics.mean(base))
                                     if row["mode"] == "train" and base else None)
    return rows


def summarize(rows):
    """Returns one dict per configuration: mean and spread (min..max) of images/sec and CPU per image."""
    groups = collections.OrderedDict()
    for row in rows:
        groups.setdefault(_key(row, "mode", "engine", "data", "precision", "replicas", "per_replica_batch_size"),
                          []).append(row)
    summary = []
    for (mode, engine, data, precision, replicas, batch), group in groups.items():
        rates = [r["images_per_sec"] for r in group]
        efficiencies = [r["scaling_efficiency"] for r in group if r.get("scaling_efficiency") is not None]
        mfus = [r["mfu"] for r in group if r.get("mfu") is not None]
        summary.append({
            "mode": mode, "engine": engine, "data": data, "precision": precision, "replicas": replicas,
            "per_replica_batch_size": batch,
            "global_batch_size": group[0]["global_batch_size"], "repeats": len(group),
            "images_per_sec": statistics.mean(rates), "images_per_sec_min": min(rates),
            "images_per_sec_max": max(rates),
            "images_per_sec_median": (statistics.median(r["images_per_sec_median"] for r in group)
                                      if group[0].get("images_per_sec_median") else None),
            "images_per_sec_span": (statistics.mean(r["images_per_sec_span"] for r in group)
                                    if group[0].get("images_per_sec_span") else None),
            "cpu_ms_per_image": 1000 * statistics.mean(r["cpu_seconds_per_image"] for r in group),
            "epoch_seconds": (statistics.mean(r["epoch_seconds"] for r in group)
                              if group[0]["epoch_seconds"] else None),
            "scaling_efficiency": statistics.mean(efficiencies) if efficiencies else None,
            "mfu": statistics.mean(mfus) if mfus else None,
            "mfu_min": min(mfus) if mfus else None, "mfu_max": max(mfus) if mfus else None,
        })
    return summary


REFERENCES = (("keras", "Keras fit"), ("custom_loop", "custom loop"), ("limit", "limit"))
ENGINE_NAMES = {"estimator": "Estimator", "keras": "Keras fit", "custom_loop": "custom loop", "limit": "limit"}


def median_interval(values, confidence=0.95, resamples=2000, seed=0):
    """Returns (median, low, high): the median of `values` and a percentile-bootstrap interval of
    it at `confidence` (seeded, so a report written again gives the same interval)."""
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(resamples))
    tail = int((1 - confidence) / 2 * resamples)
    return statistics.median(values), medians[tail], medians[resamples - 1 - tail]


def paired_ratios(rows, key, base_key):
    """Returns each repeat's ratio of images/sec over the timed span (everything between steps
    included) of configuration `key` against `base_key`, both measured in that repeat; keys are
    (mode, engine, data, precision, replicas, per_replica_batch_size)."""
    def by_repeat(wanted):
        return {r["repeat"]: r.get("images_per_sec_span") or r["images_per_sec"] for r in rows
                if _key(r, "mode", "engine", "data", "precision", "replicas", "per_replica_batch_size") == wanted}
    these, bases = by_repeat(key), by_repeat(base_key)
    return [these[repeat] / bases[repeat] for repeat in sorted(these) if repeat in bases]


def ratios(summary, rows=()):
    """Returns (label, ratio of images/sec, ratio of CPU per image, paired) comparisons measured in
    this run: the Estimator against each reference engine, every other engine against the limit,
    real / synthetic data, bf16 and fp16 against fp32, and each input variant against the design's
    recipe. `paired`, for the engine comparisons when `rows` hold two or more repeats of both, is
    (median, low, high, repeats at or above 1, repeats) of paired_ratios, low..high its 95% interval."""
    by_key = {(s["mode"], s["engine"], s["data"], s["precision"], s["replicas"], s["per_replica_batch_size"]): s
              for s in summary}
    found = []

    def add_engines(label, key, base_key):
        per_repeat = paired_ratios(rows, key, base_key)
        paired = (median_interval(per_repeat) + (sum(r >= 1 for r in per_repeat), len(per_repeat))
                  if len(per_repeat) > 1 else None)
        found.append((label, by_key[key]["images_per_sec"] / by_key[base_key]["images_per_sec"], None, paired))

    for key, s in by_key.items():
        mode, engine, data, precision, replicas, batch = key
        where = f"{precision}, {replicas} replica(s), batch {batch}/replica"
        if mode == "train" and engine == "estimator":
            for reference, name in REFERENCES:
                if ("train", reference, data, precision, replicas, batch) in by_key:
                    add_engines(f"Estimator / {name}, {data} data, {where}", key,
                            ("train", reference, data, precision, replicas, batch))
        if mode == "train" and engine in ("keras", "custom_loop"):
            if ("train", "limit", data, precision, replicas, batch) in by_key:
                add_engines(f"{ENGINE_NAMES[engine]} / limit, {data} data, {where}", key,
                        ("train", "limit", data, precision, replicas, batch))
        if mode == "train" and engine == "estimator":
            if data == "real":
                synthetic = by_key.get(("train", "estimator", "synthetic", precision, replicas, batch))
                if synthetic:
                    found.append((f"real / synthetic data, Estimator, {where}",
                                  s["images_per_sec"] / synthetic["images_per_sec"], None, None))
        if mode == "train" and precision != "fp32":
            fp32 = by_key.get(("train", engine, data, "fp32", replicas, batch))
            if fp32:
                found.append((f"{precision} / fp32, {engine}, {data} data, {replicas} replica(s), batch {batch}/replica",
                              s["images_per_sec"] / fp32["images_per_sec"], None, None))
        if mode == "input" and data != "design":
            design = by_key.get(("input", "input", "design", precision, replicas, batch))
            if design:
                found.append((f"input '{data}' / design recipe, batch {batch}",
                              s["images_per_sec"] / design["images_per_sec"],
                              design["cpu_ms_per_image"] / s["cpu_ms_per_image"], None))
    return found


def step_overheads(summary):
    """Returns one dict per training configuration with a limit row beside it: each engine's
    milliseconds per step (global batch / images/sec over the timed span, everything between steps
    included; the mean of the steps' own windows for rows without one) and that minus the limit's,
    the time an engine spends per step beyond the step's own computation; and the same in process
    CPU milliseconds per step (all threads), which a shared machine's load moves far less."""
    limits = {(s["data"], s["precision"], s["replicas"], s["per_replica_batch_size"]): s for s in summary
              if s["mode"] == "train" and s["engine"] == "limit"}
    found = []
    for s in summary:
        limit = limits.get((s["data"], s["precision"], s["replicas"], s["per_replica_batch_size"]))
        if s["mode"] != "train" or s["engine"] == "limit" or not limit:
            continue
        step_ms = 1000 * s["global_batch_size"] / (s.get("images_per_sec_span") or s["images_per_sec"])
        limit_ms = 1000 * limit["global_batch_size"] / (limit.get("images_per_sec_span") or limit["images_per_sec"])
        found.append({"engine": s["engine"], "data": s["data"], "precision": s["precision"],
                      "replicas": s["replicas"], "per_replica_batch_size": s["per_replica_batch_size"],
                      "step_ms": step_ms, "limit_step_ms": limit_ms, "overhead_ms": step_ms - limit_ms,
                      "fraction_of_limit": limit_ms / step_ms,
                      "cpu_overhead_ms": (s["cpu_ms_per_image"] - limit["cpu_ms_per_image"]) * s["global_batch_size"],
                      "cpu_fraction_of_limit": limit["cpu_ms_per_image"] / s["cpu_ms_per_image"]})
    return found


def _fmt(value, pattern):
    return "" if value is None else pattern.format(value)


def few_steps_caution(rows):
    """Returns report lines cautioning that figures timed over fewer than FEW_TIMED_STEPS steps (and the
    ratios between them) move with a single slow step; none when every row timed enough."""
    timed = [r["timed_steps"] for r in rows if r.get("timed_steps")]
    if not timed or min(timed) >= FEW_TIMED_STEPS:
        return []
    return ["", f"**Caution:** a figure here times only {min(timed)} step(s) (--timed-steps): one slow step "
                f"moves it and every ratio it is part of. Compare figures timed over {FEW_TIMED_STEPS} steps or "
                "more (the default is 20)."]


def markdown_report(summary, header, rows=()):
    """Returns report.md: the header, a table of configurations and the ratios."""
    lines = [f"# Benchmark: {header}", "",
             "| mode | engine | data | precision | replicas | batch/replica | global batch | images/sec (mean) "
             "| min..max | median-step images/sec | span images/sec | CPU ms/image | full epoch s | scaling eff. | MFU | repeats |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in summary:
        lines.append(
            f"| {s['mode']} | {s['engine']} | {s['data']} | {s['precision']} | {s['replicas']} "
            f"| {s['per_replica_batch_size']} "
            f"| {s['global_batch_size']} | {s['images_per_sec']:.1f} "
            f"| {s['images_per_sec_min']:.1f}..{s['images_per_sec_max']:.1f} "
            f"| {_fmt(s.get('images_per_sec_median'), '{:.1f}')} | {_fmt(s.get('images_per_sec_span'), '{:.1f}')} "
            f"| {s['cpu_ms_per_image']:.2f} "
            f"| {_fmt(s['epoch_seconds'], '{:.1f}')} | {_fmt(s['scaling_efficiency'], '{:.2f}')} "
            f"| {_fmt(s.get('mfu'), '{:.2f}')} | {s['repeats']} |")
    lines += few_steps_caution(rows)
    peaks = sorted({(r["precision"], r["peak_flops"], r["peak_source"]) for r in rows if r.get("peak_flops")})
    if peaks:
        lines += ["", "MFU: images/sec x training FLOPs per image (the forward pass and the trained layers' "
                  "gradients, models/flops.py) / the peak:"]
        lines += [f"- {precision}: {flops / 1e9:.1f} GFLOP/s, {source}" for precision, flops, source in peaks]
    lines += _conv_gradient_lines(rows)
    found = ratios(summary, rows)
    if found:
        lines += ["", "Ratios (same invocation). Means: of images/sec over the repeats. Paired: each repeat's "
                  "ratio of the two engines' images/sec over the timed span (everything between steps "
                  "included), measured in that repeat; their median, its 95% bootstrap interval, and how "
                  "many repeats were at or above 1:", "",
                  "| comparison | images/sec ratio (means) | paired: median | 95% interval | repeats >= 1 "
                  "| CPU per image: baseline / this |", "|---|---|---|---|---|---|"]
        lines += [f"| {label} | {r:.2f} | {_fmt(p and p[0], '{:.2f}')} "
                  f"| {p and f'{p[1]:.2f}..{p[2]:.2f}' or ''} | {p and f'{p[3]} of {p[4]}' or ''} "
                  f"| {_fmt(c, '{:.2f}')} |" for label, r, c, p in found]
    overheads = step_overheads(summary)
    if overheads:
        lines += ["", "Time per step beyond the limit's (ms; from the images/sec over each timed span):", "",
                  "| engine | data | precision | replicas | batch/replica | ms/step | limit ms/step "
                  "| overhead ms/step | fraction of the limit | CPU ms/step beyond the limit's "
                  "| fraction of the limit's CPU |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        lines += [f"| {o['engine']} | {o['data']} | {o['precision']} | {o['replicas']} | {o['per_replica_batch_size']} "
                  f"| {o['step_ms']:.2f} | {o['limit_step_ms']:.2f} | {o['overhead_ms']:.2f} "
                  f"| {o['fraction_of_limit']:.2f} | {o['cpu_overhead_ms']:.2f} | {o['cpu_fraction_of_limit']:.2f} |"
                  for o in overheads]
    return "\n".join(lines) + "\n"


def _conv_gradient_lines(rows):
    """Returns the report's line saying where the Estimator's wide convolutions took their weight gradients as
    matmuls (--conv-gradients; rows before it have no such field), or no line where none did."""
    matmul = sorted({r["precision"] for r in rows
                     if r.get("engine") == "estimator" and r.get("conv_gradients") == "matmul"})
    if not matmul:
        return []
    return ["", f"The Estimator's rows in {', '.join(matmul)} computed the weight gradients of wide convolutions as "
                "matmuls (--conv-gradients; pipeline/conv_gradients.py); the other engines' and precisions' are "
                "TensorFlow's kernels."]


def write_outputs(rows, out_dir, header):
    """Writes results.csv, results.json, report.md and the plots into `out_dir`; returns report.md's text."""
    add_scaling_efficiency(rows)
    summary = summarize(rows)
    report = write_tables(rows, out_dir, header, COLUMNS, markdown_report(summary, header, rows))
    plots.plot(summary, out_dir, title=header.split(";")[0])
    return report


def write_tables(rows, out_dir, header, columns, report):
    """Writes `rows` to results.csv (their `columns`) and results.json (whole, with `header`), and the
    markdown `report` to report.md, into `out_dir`; returns `report`."""
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "results.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    with open(os.path.join(out_dir, "results.json"), "w") as f:
        json.dump({"header": header, "rows": rows}, f, indent=2)
    with open(os.path.join(out_dir, "report.md"), "w") as f:
        f.write(report)
    return report
