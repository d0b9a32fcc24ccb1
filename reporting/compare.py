"""One table of several runs' results.json, side by side, as markdown or CSV.

Model dirs are read through tf.io.gfile, so they may be local or on any file system
TensorFlow reads (gs://, and s3:// with tensorflow-io).
"""
import csv
import io
import json
import logging
import os
import posixpath

import tensorflow as tf

from reporting import RunsError

RESULTS_FILE = "results.json"  # pipeline.results.RESULTS_FILE; kept here so this room imports no pipeline
PROGRESS_FILE = "training_progress.json"  # pipeline.training_record.PROGRESS_FILE, likewise

log = logging.getLogger(__name__)


def _field(path):
    def read(results):
        value = results
        for key in path.split("/"):
            value = value.get(key) if isinstance(value, dict) else None
        return value
    return read


def _augment(results):
    return ",".join(f"{name}={value}" for name, value in results.get("augment") or []) or "none"


def _schedule(results):
    return (results.get("learning_rate_schedule") or {}).get("kind")


def _data(source):
    """Returns the data column's word for results.json's `data_source`: real, sample or synthetic."""
    if not source:
        return None
    return "sample" if "sample" in source else source.split()[0]


def _recipe(results):
    """Returns what a run did beyond plain training, in the flags' words: the run --init-from started it from
    (the folder's name, and the step read), its seed, --optimizer other than Adam, --weight-decay, --ema's decay,
    --label-smoothing, --mixup and --cutmix (and --mix-switch-prob with both),
    --class-weight, --tta's views and --calibrate's temperature; '' for none of them (or a results.json that
    records none)."""
    start = results.get("init_from")
    parts = [f"init-from {os.path.basename(str(start.get('model_dir', '')).rstrip('/'))}"
             f"{' step ' + str(start['step']) if start.get('step') is not None else ''}"] \
        if isinstance(start, dict) else []
    parts += [f"seed {results['seed']}"] if results.get("seed") is not None else []
    parts += [results["optimizer"]] if results.get("optimizer", "adam") != "adam" else []
    parts += [f"weight-decay {results['weight_decay']:g}"] if results.get("weight_decay") else []
    if results.get("ema"):
        parts.append(f"ema {results['ema']['decay']:g}")
    parts += [f"{name.replace('_', '-')} {results[name]:g}" for name in ("label_smoothing", "mixup", "cutmix")
              if results.get(name)]
    if results.get("mixup") and results.get("cutmix") and results.get("mix_switch_prob") is not None:
        parts.append(f"mix-switch-prob {results['mix_switch_prob']:g}")  # (it acts only with both)
    if results.get("class_weights"):
        parts.append("class-weight")
    if results.get("tta"):
        parts.append("tta " + "+".join(results["tta"]))
    temperature = ((results.get("clinical") or {}).get("calibration") or {}).get("temperature")
    if isinstance(temperature, dict) and temperature.get("temperature"):
        parts.append(f"temperature {temperature['temperature']:.2f}")
    return ", ".join(parts)


# (column, how to read it from results.json, how to show it)
COLUMNS = [
    ("run", None, str),
    ("task", _field("task"), str),
    ("data", lambda r: _data(r.get("data_source")), str),
    ("model", lambda r: r.get("model") or r.get("task"), str),
    ("step", _field("global_step"), str),
    ("replicas", _field("replicas"), str),
    ("batch", _field("global_batch_size"), str),
    ("precision", _field("precision"), str),
    ("lr", _field("learning_rate_base"), "{:g}".format),
    ("schedule", _schedule, str),
    ("augment", _augment, str),
    ("recipe", _recipe, str),
    ("epochs", _field("epochs_trained"), "{:g}".format),
    ("images/s", _field("train_images_per_sec"), "{:.1f}".format),
    ("mfu", _field("mfu"), "{:.3f}".format),
    ("best val acc", _field("best/validation_accuracy"), "{:.4f}".format),
    ("test acc", _field("eval_accuracy"), "{:.4f}".format),
    ("test loss", _field("eval_loss"), "{:.4f}".format),
    ("finished", _field("finished_at"), str),
]


def find_runs(folders):
    """Returns [(run dir, results dict)] for each folder given: the folder itself when it holds
    results.json, else each model dir directly inside it that does (in name order).
    Raises RunsError naming a folder that holds neither."""
    runs = []
    for folder in folders:
        folder = folder.rstrip("/") or "/"
        if posixpath.basename(folder) == RESULTS_FILE and not tf.io.gfile.isdir(folder):
            folder = posixpath.dirname(folder) or "."  # the results file itself: its run's folder
        if tf.io.gfile.exists(posixpath.join(folder, RESULTS_FILE)):
            runs.append((folder, _read(folder)))
            continue
        names = sorted(name.rstrip("/") for name in _listdir(folder))
        inside = [name for name in names if tf.io.gfile.exists(posixpath.join(folder, name, RESULTS_FILE))]
        if not inside:
            raise RunsError(f"{folder} holds no {RESULTS_FILE}, nor any model dir with one: pass the model dir "
                            "of a finished run (or a folder of them)")
        unfinished = [name for name in names if name not in inside
                      and tf.io.gfile.exists(posixpath.join(folder, name, PROGRESS_FILE))]
        if unfinished:
            log.warning("left out %d run%s of %s with no %s yet (unfinished, or stopped): %s", len(unfinished),
                        "" if len(unfinished) == 1 else "s", folder, RESULTS_FILE, ", ".join(unfinished))
        read, damaged = {}, []
        for name in inside:
            try:
                read[name] = _read(posixpath.join(folder, name), strict=False)
            except RunsError:
                damaged.append(name)
        others = [name for name in read if read[name] is None]
        if len(others) + len(damaged) == len(inside):
            _read(posixpath.join(folder, (damaged or inside)[0]))  # (raises, naming it)
        if damaged:  # one run's damaged file hid every other run's figures
            log.warning("left out %d run%s of %s whose %s is damaged (not valid JSON): %s; run each one's command "
                        "again, which writes it anew", len(damaged), "" if len(damaged) == 1 else "s", folder,
                        RESULTS_FILE, ", ".join(damaged))
        if others:  # a benchmark's output beside the runs, say: its results.json is another kind
            log.warning("left out %d folder%s of %s whose %s is not a run's results (a benchmark's, say): %s",
                        len(others), "" if len(others) == 1 else "s", folder, RESULTS_FILE, ", ".join(others))
        runs.extend((posixpath.join(folder, name), read[name]) for name in inside if read.get(name) is not None)
    return runs


def _listdir(folder):
    if tf.io.gfile.exists(folder) and not tf.io.gfile.isdir(folder):
        raise RunsError(f"{folder} is a file, not a model dir: pass the model dir of a finished run (or its "
                        f"{RESULTS_FILE})")
    try:
        return tf.io.gfile.listdir(folder)
    except tf.errors.NotFoundError:
        raise RunsError(f"{folder} does not exist: pass the model dir of a finished run") from None


def _read(folder, strict=True):
    """Returns the run results in `folder`; raises RunsError for a file that is not JSON, and for JSON that is
    not a run's results unless not `strict` (then None)."""
    path = posixpath.join(folder, RESULTS_FILE)
    try:
        with tf.io.gfile.GFile(path) as f:
            results = json.load(f)
    except ValueError as e:
        raise RunsError(f"{path} is not valid JSON ({e}): it is damaged (a run writes it whole, by a rename); "
                        "run that run's command again, which writes it anew, or leave it out") from None
    if not isinstance(results, dict) or "task" not in results:
        if not strict:
            return None
        kind = type(results).__name__ if not isinstance(results, dict) else "object without a task"
        raise RunsError(f"{path} holds a JSON {kind}, not a run's results: leave it out")
    return results


def table_rows(runs):
    """Returns the table: a header row, then one row of strings per run ('' where a run lacks a figure)."""
    rows = [[name for name, _, _ in COLUMNS]]
    for run_dir, results in runs:
        row = []
        for name, read, show in COLUMNS:
            value = run_dir if read is None else read(results)
            row.append("" if value is None else show(value))
        rows.append(row)
    return rows


def as_markdown(rows):
    """Returns `rows` as a markdown table, numbers right-aligned."""
    numeric = [all(_is_number(row[i]) for row in rows[1:] if row[i]) for i in range(len(rows[0]))]
    lines = ["| " + " | ".join(rows[0]) + " |",
             "|" + "|".join("---:" if num else "---" for num in numeric) + "|"]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows[1:]]  # (a|b: a run)
    return "\n".join(lines)


def as_csv(rows):
    """Returns `rows` as CSV text."""
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue()


def _is_number(text):
    try:
        float(text)
    except ValueError:
        return False
    return True
