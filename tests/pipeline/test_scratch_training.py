"""The default from-scratch network (small_resnet) through train_images.py: it trains on 1 and 2 CPU
replicas (bf16, --deterministic), records its name in results.json, resumes from its checkpoint
(BatchNorm's moving statistics included), and learns an easy generated dataset beyond chance."""
import json
import math
import os
import subprocess
import sys

import pytest
import tensorflow as tf

from pipeline.flags import build_parser
from pipeline.roles import run
from pipeline.tasks.images import TASK
from tests.conftest import ROOT
from tests.images_data import make_shapes_folder

FEW = ["--image-size", "32", "--batch-size", "4", "--warm-up-steps", "0", "--checkpoint-steps", "100",
       "--log-steps", "100", "--validation-fraction", "0", "--bootstrap-resamples", "10"]


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    return make_shapes_folder(str(tmp_path_factory.mktemp("shapes")), per_class=8)


def train(data_dir, model_dir, *flags):
    """Returns the results.json dict of train_images.py run in this process with `flags`."""
    return run(TASK, build_parser(TASK).parse_args(["--data-dir", data_dir, "--model-dir", model_dir, *FEW, *flags]))


def moving_means(model_dir):
    """Returns {name: value} of the BatchNorm moving means in model_dir's latest checkpoint."""
    checkpoint = tf.train.latest_checkpoint(model_dir)
    return {name: tf.train.load_variable(checkpoint, name) for name, _ in tf.train.list_variables(checkpoint)
            if name.endswith("moving_mean")}


def test_the_default_model_is_the_small_resnet():
    assert build_parser(TASK).parse_args(["--data-dir", "x"]).model == "small_resnet"


def test_one_replica_through_the_script_records_the_model_and_resumes(shapes, tmp_path):
    model_dir = str(tmp_path / "model")
    command = [sys.executable, os.path.join(ROOT, "scripts", "train_images.py"), "--data-dir", shapes,
               "--model-dir", model_dir, *FEW]
    first = subprocess.run(command + ["--max-steps", "3"], capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    results = json.loads(open(os.path.join(model_dir, "results.json")).read())
    assert results["model"] == "small_resnet" and results["replicas"] == 1 and results["global_step"] == 3
    means = moving_means(model_dir)
    assert means and any(abs(v).max() > 0 for v in means.values())  # the statistics moved from 0 and were saved
    resumed = train(shapes, model_dir, "--max-steps", "5")
    assert (resumed["start_global_step"], resumed["global_step"]) == (3, 5) and resumed["model"] == "small_resnet"
    assert resumed["eval_examples"] == 6


def test_two_replicas_in_bf16_deterministic_repeat_exactly_and_resume(shapes, tmp_path):
    flags = ["--model", "small_resnet", "--cpu-replicas", "2", "--precision", "bf16", "--deterministic",
             "--seed", "3", "--augment", "flip,translate=0.1", "--max-steps", "2"]
    runs = [train(shapes, str(tmp_path / name), *flags) for name in ("a", "b")]
    assert all(r["replicas"] == 2 and r["precision"] == "bf16" and r["model"] == "small_resnet" for r in runs)
    a, b = (tf.train.latest_checkpoint(str(tmp_path / name)) for name in ("a", "b"))
    names = [name for name, _ in tf.train.list_variables(a) if name.startswith("block")]
    assert names and all((tf.train.load_variable(a, n) == tf.train.load_variable(b, n)).all() for n in names)
    resumed = train(shapes, str(tmp_path / "a"), *flags[:-1], "4")
    assert (resumed["start_global_step"], resumed["global_step"]) == (2, 4)
    assert moving_means(str(tmp_path / "a")).keys() == moving_means(str(tmp_path / "b")).keys()


def chance_ceiling(n, classes, alpha=1e-3):
    """Returns the smallest accuracy on `n` test images that guessing among `classes` reaches with
    probability below `alpha` (the binomial tail)."""
    p = 1 / classes
    for k in range(n + 1):
        if sum(math.comb(n, j) * p ** j * (1 - p) ** (n - j) for j in range(k, n + 1)) < alpha:
            return k / n
    return 1.0


def test_it_learns_easy_shapes_beyond_chance_within_a_small_budget(tmp_path):
    # 3 classes x 60 images (bright shapes on dark, 24-64 px, every format): 36 test images; 120 steps of
    # 16 (about 13 epochs) at 32 px, the rest the defaults a user gets.
    data = make_shapes_folder(str(tmp_path / "easy"), per_class=60, seed=4)
    results = train(data, str(tmp_path / "model"), "--batch-size", "16", "--max-steps", "120", "--seed", "1",
                    "--warm-up-steps", "10")
    assert results["eval_examples"] == 36 and results["model"] == "small_resnet"
    assert results["eval_accuracy"] >= chance_ceiling(36, 3), results["confusion_matrix"]
