"""What a training input_fn yields: class counts per batch, the class mix against the
dataset's, throughput, and a contact sheet of the first batch."""
import time

import numpy as np
import tensorflow as tf

from inspection import sheet
from pipeline.signals import Interrupted, StopSignals
from reporting.fonts import class_labels


def inspect_batches(input_fn, num_batches, num_classes, input_context=None, log=None, progress_every_secs=10.0):
    """Returns a report dict over the first `num_batches` batches of `input_fn`.

    Keys: class_counts_per_batch (a list per batch, in class order),
    images_per_sec (batches after the first, which includes start-up; the first
    alone when there is one), first_images and first_labels (numpy arrays of the
    first batch, labels as class indices).
    A stop (SIGINT, SIGTERM, SIGHUP) ends the count after the batch being read: the report is of the batches
    read, and 'stopped' holds the stop (pipeline.signals.Interrupted), to raise once it is shown (None when every
    batch was read); a second stop raises at once. (Raised from the handler, the first one came out inside
    TensorFlow's iterator, whose C++ then corrupted its heap now and then: an abort instead of the report.)
    `log` (a callable taking a line), when given, is told when the first batch came and, every
    `progress_every_secs`, how many have been read.
    """
    dataset = input_fn(input_context) if input_context is not None else input_fn()
    counts, first_images, first_labels = [], None, None
    start = time.perf_counter()
    after_first, images_after_first = start, 0
    with StopSignals() as stop, stop.training():
        for features, labels in dataset.take(num_batches).as_numpy_iterator():
            indices = labels.argmax(axis=-1)
            counts.append(np.bincount(indices, minlength=num_classes).tolist())
            if first_images is None:
                first_images, first_labels = next(iter(features.values())), indices
                after_first = next_report = time.perf_counter()
                if log and num_batches > 1:
                    log(f"the first batch came after {after_first - start:.1f} s; reading {num_batches - 1:,} more")
            else:
                images_after_first += len(indices)
            if stop.requested():
                break
            if log and time.perf_counter() - next_report >= progress_every_secs:
                next_report += progress_every_secs
                log(f"read {len(counts):,} of {num_batches:,} batches")
    stopped = Interrupted(stop.received) if stop.requested() else None
    end = time.perf_counter()
    if images_after_first:
        rate = images_after_first / (end - after_first)
    else:
        rate = sum(counts[0]) / (end - start) if counts else 0.0
    return {"class_counts_per_batch": counts, "images_per_sec": rate,
            "first_images": first_images, "first_labels": first_labels, "stopped": stopped}


def class_mix(counts_per_batch, dataset_counts=None):
    """Returns {'class_counts', 'class_share', 'dataset_class_share' (None if unknown),
    'single_class_batches'} for per-batch class counts."""
    counts = np.asarray(counts_per_batch).reshape(len(counts_per_batch), -1)
    totals = counts.sum(axis=0)
    return {
        "class_counts": totals.tolist(),
        "class_share": (totals / max(1, totals.sum())).tolist(),
        "dataset_class_share": (np.asarray(dataset_counts) / np.sum(dataset_counts)).tolist()
        if dataset_counts is not None and np.sum(dataset_counts) else None,
        "single_class_batches": int(((counts.max(axis=1) == counts.sum(axis=1)) & (counts.sum(axis=1) > 1)).sum()),
    }


def format_report(report, class_names, header):
    """Returns the report as text: a table of class counts per batch, then the mix and throughput."""
    width = max(6, *(len(n) for n in class_names))
    lines = [header, "batch " + " ".join(f"{n:>{width}}" for n in class_names)]
    for i, counts in enumerate(report["class_counts_per_batch"], 1):
        lines.append(f"{i:5d} " + " ".join(f"{c:>{width}d}" for c in counts))
    total = sum(report["class_counts"])
    lines.append(f"class mix over {len(report['class_counts_per_batch'])} batches ({total} images)"
                 + (" against the dataset's:" if report["dataset_class_share"] else ":"))
    for i, name in enumerate(class_names):
        expected = (f"  (dataset {100 * report['dataset_class_share'][i]:5.1f}%)"
                    if report["dataset_class_share"] else "")
        lines.append(f"  {name:{width}s} {100 * report['class_share'][i]:5.1f}%{expected}")
    lines.append(f"batches of a single class: {report['single_class_batches']}")
    lines.append(f"input throughput: {report['images_per_sec']:.1f} images/sec (after the first batch)")
    return "\n".join(lines)


def write_contact_sheet(images, labels, class_names, path, columns=8, max_images=64):
    """Writes up to `max_images` images of a batch in a grid, each titled with its class; returns `path`."""
    import matplotlib
    matplotlib.use("Agg")
    settings, titles = class_labels(class_names)
    with matplotlib.rc_context(settings):
        return _contact_sheet(images[:max_images], labels[:max_images], titles, path, columns)


def _contact_sheet(images, labels, titles, path, columns):
    import matplotlib.pyplot as plt
    rows = max(1, -(-len(images) // columns))
    figure, axes = plt.subplots(rows, columns, figsize=(columns * 1.6, rows * 1.8), squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    for ax, image, label in zip(axes.flat, images, labels):
        image = np.asarray(image, np.float32)
        ax.imshow(image[..., 0] if image.shape[-1] == 1 else image / max(1.0, image.max()), cmap="gray",
                  vmin=0, vmax=255 if image.max() > 1 else 1)
        ax.set_title(titles[int(label)], fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=80, metadata={"Title": sheet.TITLE})
    plt.close(figure)
    return path


def input_context(workers, worker_index):
    """Returns the InputContext of worker `worker_index` of `workers` (None for one worker)."""
    if workers <= 1:
        return None
    return tf.distribute.InputContext(num_input_pipelines=workers, input_pipeline_id=worker_index,
                                      num_replicas_in_sync=workers)
