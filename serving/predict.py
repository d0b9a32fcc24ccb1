"""The client side: loading an exported model and classifying image files with it, in batches."""
import dataclasses
import sys
import time
from typing import Callable, List

import tensorflow as tf

from acquisition.image_formats import check_image, is_image_name
from serving import ExportNotFoundError
from acquisition import storage
from serving.export import CLASS_NAME, CLASS_NAMES_FILE, PROBABILITIES, is_complete

BATCH_SIZE = 64  # files read and classified at once: memory stays flat however many are given


@dataclasses.dataclass
class Predictor:
    """An exported classifier: its class names and `classify`, a function from a list of image file
    contents to (probabilities [n, classes], the predicted class names [n])."""
    export_dir: str
    class_names: List[str]
    classify: Callable


def resolve_export_dir(path):
    """Returns the SavedModel folder at `path`, or the newest one among its timestamped subfolders, or,
    for a model dir, the newest in its export/ (where a run exports its best, or its last, model). On a
    URL, exports still being copied (without their completion marker) are passed over."""
    if storage.isfile(storage.join(path, "saved_model.pb")) and is_complete(path):
        return path
    versions = sorted((d for d in storage.listdir(path) if d.isdigit() and is_complete(storage.join(path, d))),
                      key=int) if storage.isdir(path) else []
    if not versions and storage.isdir(storage.join(path, "export")):
        return resolve_export_dir(storage.join(path, "export"))
    if not versions:
        raise ExportNotFoundError(f"no exported model at {path}: pass --model with a training run's model dir or "
                                  "the export folder it printed (<model dir>/export/<timestamp>)")
    return storage.join(path, versions[-1])


def load_predictor(path):
    """Returns the Predictor of the SavedModel at `path` (see resolve_export_dir)."""
    export_dir = resolve_export_dir(path)
    serving = tf.saved_model.load(export_dir).signatures["serving_default"]
    # 'jpeg_bytes' (the OCT job) or 'image_bytes' (the images job): the signature's one input
    (bytes_key,) = serving.structured_input_signature[1]
    text = storage.read_text(storage.join(export_dir, "assets.extra", CLASS_NAMES_FILE))
    class_names = [line.strip() for line in text.splitlines() if line.strip()]

    def classify(contents):
        outputs = serving(**{bytes_key: tf.constant(contents, tf.string)})
        if CLASS_NAME not in outputs:  # exported before the signature named the classes
            probabilities = next(iter(outputs.values())).numpy()
            return probabilities, [class_names[i] for i in probabilities.argmax(axis=-1)]
        return outputs[PROBABILITIES].numpy(), [n.decode() for n in outputs[CLASS_NAME].numpy()]

    return Predictor(export_dir, class_names, classify)


def image_paths(paths):
    """Yields the files to classify: each path that is not a folder as given, and the image files
    (see image_formats.is_image_name) below each folder, walked recursively in sorted order."""
    for path in paths:
        if not storage.isdir(path):
            yield path
            continue
        for parent, dirs, names in storage.walk(path):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            yield from (storage.join(parent, n) for n in sorted(names) if is_image_name(n))


def _batches(iterable, size):
    batch = []
    for item in iterable:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def classify_files(predictor, paths, batch_size=BATCH_SIZE, progress_every_secs=10.0, log=None):
    """Yields one dict per file of image_paths(paths), in order, `batch_size` files at a time:
    {'file', 'class', 'probabilities': {name: p}} or {'file', 'error'}.

    Files whose headers show they cannot be decoded get their problem as the error;
    a batch the model refuses is retried file by file, so one bad file costs only
    itself. Every `progress_every_secs` a line on `log` (stderr) says how far it is.
    """
    log = log or (lambda line: print(line, file=sys.stderr, flush=True))
    start = last = time.monotonic()
    done = 0
    for batch in _batches(image_paths(paths), batch_size):
        yield from _classify_batch(predictor, batch)
        done += len(batch)
        if time.monotonic() - last >= progress_every_secs:
            last = time.monotonic()
            log(f"classified {done} files ({done / (last - start):.0f}/s)")


def _classify_batch(predictor, paths):
    results, readable, contents = [], [], []
    for path in paths:
        problem = "file not found" if not storage.isfile(path) else check_image(path).problem
        results.append({"file": path, **({"error": problem} if problem else {})})
        if not problem:
            contents.append(storage.read_bytes(path))
            readable.append(results[-1])
    if readable:
        try:
            _fill(predictor, readable, contents)
        except tf.errors.InvalidArgumentError:
            for entry, data in zip(readable, contents):  # find the file the decoder refused
                try:
                    _fill(predictor, [entry], [data])
                except tf.errors.InvalidArgumentError as e:
                    entry["error"] = f"cannot be decoded ({e.message.strip().splitlines()[0][:200]})"
    return results


def _fill(predictor, entries, contents):
    probabilities, names = predictor.classify(contents)
    for entry, probs, name in zip(entries, probabilities, names):
        entry["class"] = name
        entry["probabilities"] = {n: float(p) for n, p in zip(predictor.class_names, probs)}
