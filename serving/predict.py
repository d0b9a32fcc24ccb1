"""The client side: loading an exported model and classifying image files with it."""
import dataclasses
import os
from typing import Callable, List

import tensorflow as tf

from input_fns.image_folder import jpeg_problem
from serving import ExportNotFoundError
from serving.export import CLASS_NAME, CLASS_NAMES_FILE, PROBABILITIES


@dataclasses.dataclass
class Predictor:
    """An exported classifier: its class names and `classify`, a function from a list of JPEG
    contents to (probabilities [n, classes], the predicted class names [n])."""
    export_dir: str
    class_names: List[str]
    classify: Callable


def resolve_export_dir(path):
    """Returns the SavedModel folder at `path`, or the newest one among its timestamped subfolders."""
    if os.path.isfile(os.path.join(path, "saved_model.pb")):
        return path
    versions = sorted((d for d in os.listdir(path) if d.isdigit()), key=int) if os.path.isdir(path) else []
    if not versions:
        raise ExportNotFoundError(f"no exported model at {path}: pass --model with the export folder a training "
                         "run printed (<model dir>/export/<timestamp>)")
    return os.path.join(path, versions[-1])


def load_predictor(path):
    """Returns the Predictor of the SavedModel at `path` (see resolve_export_dir)."""
    export_dir = resolve_export_dir(path)
    serving = tf.saved_model.load(export_dir).signatures["serving_default"]
    with open(os.path.join(export_dir, "assets.extra", CLASS_NAMES_FILE)) as f:
        class_names = [line.strip() for line in f if line.strip()]

    def classify(jpeg_contents):
        outputs = serving(jpeg_bytes=tf.constant(jpeg_contents, tf.string))
        if CLASS_NAME not in outputs:  # exported before the signature named the classes
            probabilities = next(iter(outputs.values())).numpy()
            return probabilities, [class_names[i] for i in probabilities.argmax(axis=-1)]
        return outputs[PROBABILITIES].numpy(), [n.decode() for n in outputs[CLASS_NAME].numpy()]

    return Predictor(export_dir, class_names, classify)


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
        probabilities, names = predictor.classify(contents)
        for entry, probs, name in zip(readable, probabilities, names):
            entry["class"] = name
            entry["probabilities"] = {n: float(p) for n, p in zip(predictor.class_names, probs)}
    return results
