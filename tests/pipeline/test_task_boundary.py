"""A task is one module plus its registry line: a tiny task defined here (this module is its job)
trains through the run loop, is benchmarked (training and input only), inspected by inspect_input
and served to predict, with no other module knowing it."""
import csv
import json
import os
import sys

import numpy as np
import tensorflow as tf
from PIL import Image

from input_fns import decode, image_list
from models.optimizers import Adam
from pipeline.flags import build_parser
from pipeline.roles import run
from pipeline.tasks import FEATURE_KEY, Task, TaskData, registry

CLASSES = ("dark", "light")
SIZE = (16, 16)

TINY = Task(name="tiny", description="Dark or light gray squares.", full_train_examples=None,
            defaults={"data_dir": None, "batch_size": 8, "epochs": 1.0, "learning_rate": 0.05,
                      "reference_batch_size": 8, "model_dir": "runs/tiny"},
            add_flags=lambda parser: None, job=lambda: sys.modules[__name__])


def _files(data_dir):
    files = sorted(os.path.join(data_dir, f) for f in os.listdir(data_dir))
    return files, [CLASSES.index(os.path.basename(f).split("-")[0]) for f in files]


def prepare_data(args, batch_size):
    """The tiny task's job half: its data."""
    files, labels = _files(args.data_dir)

    def make(training):
        return image_list.make_input_fn(image_list.ImageListConfig(
            files, labels, len(CLASSES), SIZE, 1, batch_size, training, feature_key=FEATURE_KEY, seed=0))
    return TaskData(make(True), make(False), len(files), len(files), "real", class_names=CLASSES,
                    eval_labels=labels, train_class_counts=[labels.count(0), labels.count(1)],
                    serving_input_fn=decode.make_serving_input_fn(SIZE, 1, feature_key=FEATURE_KEY,
                                                                        bytes_key="image_bytes"))


def build_model(args, learning_rate):
    """The tiny task's job half: its model."""
    inputs = tf.keras.Input(SIZE + (1,), dtype=tf.uint8, name=FEATURE_KEY)
    x = tf.keras.layers.Flatten()(tf.keras.layers.Rescaling(1 / 255)(inputs))
    model = tf.keras.Model(inputs, tf.keras.layers.Dense(2, activation="softmax", dtype="float32")(x))
    model.compile(Adam(learning_rate), "categorical_crossentropy", metrics=["accuracy"])
    return model


def test_a_task_defined_here_trains_benchmarks_inspects_and_predicts(tmp_path, monkeypatch, capsys):
    data = tmp_path / "squares"
    data.mkdir()
    for i in range(16):
        for name, level in (("dark", 40), ("light", 210)):
            Image.fromarray(np.full(SIZE, level + i, np.uint8)).save(data / f"{name}-{i:02d}.png")
    monkeypatch.setitem(registry.TASKS, "tiny", TINY)  # its registry line

    results = run(TINY, build_parser(TINY).parse_args([
        "--data-dir", str(data), "--model-dir", str(tmp_path / "model"), "--max-steps", "20",
        "--cpu-replicas", "2", "--warm-up-steps", "1"]))
    assert results["task"] == "tiny" and results["replicas"] == 2 and results["eval_examples"] == 32

    from benchmark.cli import main as benchmark
    for mode, expected in ((["--engines", "estimator", "--data", "real"], {("estimator", "real")}),
                           (["--input-only"], {("input", "pipeline")})):
        out = str(tmp_path / f"bench{len(mode)}")
        assert benchmark(["--task", "tiny", "--data-dir", str(data), "--repeats", "1", "--warm-up-steps", "1",
                          "--timed-steps", "2", "--output", out, *mode]) == 0
        with open(os.path.join(out, "results.csv")) as f:
            rows = list(csv.DictReader(f))
        assert {(r["engine"], r["data"]) for r in rows} == expected and float(rows[0]["images_per_sec"]) > 0
        assert rows[0]["epoch_seconds"] == ""  # no published training set: no epoch time derived

    from inspection.cli import main as inspect_input
    capsys.readouterr()
    assert inspect_input(["--task", "tiny", "--data-dir", str(data), "--batches", "2", "--json"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["task"] == "tiny" and report["class_names"] == list(CLASSES) and report["train_examples"] == 32

    from serving.predict import classify_files, load_predictor
    predicted = list(classify_files(load_predictor(results["export_dir"]), [str(data)]))
    assert len(predicted) == 32 and {p["class"] for p in predicted} <= set(CLASSES)
