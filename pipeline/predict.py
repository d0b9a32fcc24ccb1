"""Loading an exported model and classifying image files with it."""
import dataclasses
import os
from typing import Callable, List

import tensorflow as tf

from input_fns.image_folder import jpeg_problem
from pipeline.errors import UsageError


@dataclasses.dataclass
class Predictor:
    """An exported classifier: its class names and a function from JPEG bytes to probabilities."""
    export_dir: str
    class_names: List[str]
    probabilities: Callable


def resolve_export_dir(path):
    """Returns the SavedModel folder at `path`, or the newest one among its timestamped subfolders."""
    if os.path.isfile(os.path.join(path, "saved_model.pb")):
        return path
    versions = sorted((d for d in os.listdir(path) if d.isdigit()), key=int) if os.path.isdir(path) else []
    if not versions:
        raise UsageError(f"no exported model at {path}: pass --model with the export folder a training "
                         "run printed (<model dir>/export/<timestamp>)")
    return os.path.join(path, versions[-1])


def load_predictor(path):
    """Returns the Predictor of the SavedModel at `path` (see resolve_export_dir)."""
    export_dir = resolve_export_dir(path)
    serving = tf.saved_model.load(export_dir).signatures["serving_default"]
    with open(os.path.join(export_dir, "assets.extra", "class_names.txt")) as f:
        class_names = [line.strip() for line in f if line.strip()]

    def probabilities(jpeg_contents):
        outputs = serving(jpeg_bytes=tf.constant(jpeg_contents, tf.string))
        return next(iter(outputs.values())).numpy()

    return Predictor(export_dir, class_names, probabilities)


def classify_files(predictor, paths):
    """Returns one dict per path: {'file', 'class', 'probabilities': {name: p}} or {'file', 'error'}."""
    results, readable = [], []
    for path in paths:
        if not os.path.isfile(path):
            results.append({"file": path, "error": "file not found"})
        elif jpeg_problem(path):  # exports decode to grayscale, as the OCT job trains
            results.append({"file": path, "error": jpeg_problem(path)})
        else:
            results.append({"file": path})
            readable.append(results[-1])
    if readable:
        contents = []
        for entry in readable:
            with open(entry["file"], "rb") as f:
                contents.append(f.read())
        for entry, probs in zip(readable, predictor.probabilities(contents)):
            entry["class"] = predictor.class_names[int(probs.argmax())]
            entry["probabilities"] = {n: float(p) for n, p in zip(predictor.class_names, probs)}
    return results
