"""The benchmark's plots: throughput, MFU and epoch time against replicas, and the input pipelines'
bars (matplotlib, imported only when a plot is drawn)."""
import collections
import os


def pyplot():
    """Returns matplotlib.pyplot on the Agg backend (files only, no display)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def plot_input(summary, out_dir, title=""):
    """Writes input.png, bars of images/sec and of CPU ms/image per input variant and batch size;
    returns the paths written (none without input-only rows)."""
    bars = [s for s in summary if s["mode"] == "input"]
    if not bars:
        return []
    plt = pyplot()
    labels = [f"{s['data']}, batch {s['per_replica_batch_size']}" for s in bars]
    figure, axes = plt.subplots(1, 2, figsize=(max(8, 1.4 * len(bars) + 2), 5))
    for ax, field, label in ((axes[0], "images_per_sec", "images/sec (input alone)"),
                             (axes[1], "cpu_ms_per_image", "CPU ms per image (all threads)")):
        ax.bar(range(len(bars)), [s[field] for s in bars], color="tab:blue")
        ax.errorbar([i for i in range(len(bars))], [s[field] for s in bars], fmt="none", ecolor="black",
                    yerr=None if field != "images_per_sec" else
                    [[s[field] - s["images_per_sec_min"] for s in bars],
                     [s["images_per_sec_max"] - s[field] for s in bars]])
        ax.set_xticks(range(len(bars)))
        ax.set_xticklabels(labels, fontsize=7, rotation=30, ha="right")
        ax.set_ylabel(label)
        if field == "images_per_sec":
            ax.set_yscale("log")  # a cache's reads are orders of magnitude above decoding
        ax.grid(alpha=0.3, axis="y")
    figure.suptitle(title, fontsize=9)
    figure.tight_layout()
    path = os.path.join(out_dir, "input.png")
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return [path]


def plot(summary, out_dir, title=""):
    """Writes throughput.png (images/sec vs replicas), mfu.png (its fraction of the peak, where known)
    and time.png (epoch time vs replicas), one line per engine, data source, precision and batch
    size, and input.png for input-only rows (see plot_input); returns the paths written."""
    train = [s for s in summary if s["mode"] == "train"]
    if not train:
        return plot_input(summary, out_dir, title)
    plt = pyplot()
    lines = collections.defaultdict(list)
    for s in train:
        lines[(s["engine"], s["data"], s["precision"], s["per_replica_batch_size"])].append(s)
    paths = []
    for name, field, label in (("throughput.png", "images_per_sec", "images/sec (all replicas)"),
                               ("mfu.png", "mfu", "MFU: model FLOPs/s over the machine's peak"),
                               ("time.png", "epoch_seconds",
                                "time per epoch of the full training set, s\n(derived from images/sec)")):
        if all(s.get(field) is None for s in train):
            continue
        figure, axes = plt.subplots(figsize=(7, 4.5))
        for (engine, data, precision, batch), points in sorted(lines.items()):
            points = sorted(points, key=lambda s: s["replicas"])
            axes.plot([p["replicas"] for p in points], [p[field] for p in points], marker="o",
                      label=f"{engine}, {data}, {precision}, batch {batch}/replica")
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
