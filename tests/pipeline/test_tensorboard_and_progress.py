"""What a person watching a run sees: progress lines with an ETA, and TensorBoard charts where
training and evaluation share their tags."""
import glob
import logging
import logging.handlers
import math

import numpy as np
import pytest
import tensorflow as tf

from acquisition.fashion_mnist import CLASS_NAMES
from pipeline.flags import build_parser
from pipeline.roles import run
from pipeline.tasks.fashion import TASK


def scalars_and_images(folder):
    """Returns ({tag: [(step, value)]}, {tag: [decoded image]}) of the event files in `folder`."""
    scalars, images = {}, {}
    for path in sorted(glob.glob(f"{folder}/events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.HasField("image"):
                    images.setdefault(value.tag, []).append(tf.io.decode_png(value.image.encoded_image_string))
                elif value.HasField("simple_value"):
                    scalars.setdefault(value.tag, []).append((event.step, value.simple_value))
    return scalars, images


@pytest.fixture(scope="module")
def two_replica_run(fashion_data_dir, tmp_path_factory):
    model_dir = str(tmp_path_factory.mktemp("tensorboard") / "model")
    args = build_parser(TASK).parse_args([
        "--data-dir", fashion_data_dir, "--model-dir", model_dir, "--cpu-replicas", "2", "--batch-size", "16",
        "--max-steps", "20", "--summary-steps", "5", "--log-steps", "5", "--warm-up-steps", "1"])
    handler = logging.handlers.BufferingHandler(1000)
    logging.getLogger("hooks.progress").addHandler(handler)
    try:
        results = run(TASK, args)
    finally:
        logging.getLogger("hooks.progress").removeHandler(handler)
    return model_dir, results, [record.getMessage() for record in handler.buffer]


def test_progress_lines_give_step_of_total_loss_speed_and_eta(two_replica_run):
    _, _, lines = two_replica_run
    steps = [line for line in lines if line.startswith("step ")]
    assert [line.split(" ")[1] for line in steps] == ["5/20", "10/20", "15/20", "20/20"]
    assert steps[1].startswith("step 10/20 (50.0%): loss ")
    assert all("images/sec, ETA " in line for line in steps) and steps[-1].endswith("ETA 0s")
    assert sum(line.startswith("expected: about ") and "15 steps left" in line for line in lines) == 1


def test_training_and_evaluation_share_loss_and_accuracy_tags(two_replica_run):
    model_dir, results, _ = two_replica_run
    train, _ = scalars_and_images(model_dir)
    assert {"loss", "accuracy", "learning_rate", "images_per_sec"} <= set(train)
    assert "loss_1" not in train
    # Each replica's loss is the whole batch's divided by the replicas: written times 2, the first
    # step's loss of 10 classes from random weights is near ln 10, not half of it.
    first_step, first_loss = train["loss"][0]
    assert first_step == 1 and first_loss == pytest.approx(math.log(10), rel=0.15)
    assert all(0.0 <= value <= 1.0 for _, value in train["accuracy"])
    assert [step for step, _ in train["loss"]] == [1, 6, 11, 16]
    evaluation, _ = scalars_and_images(f"{model_dir}/eval")
    # The reported loss is each image's cross-entropy averaged over the images; the Estimator's own 'loss',
    # the mean of its batches' means, is there too.
    assert evaluation["cross_entropy"] == [(20, pytest.approx(results["eval_loss"]))]
    assert [step for step, _ in evaluation["loss"]] == [20]
    assert evaluation["accuracy"] == [(20, pytest.approx(results["eval_accuracy"]))]


def test_each_evaluation_writes_per_class_figures_and_a_confusion_matrix_image(two_replica_run):
    model_dir, results, _ = two_replica_run
    evaluation, images = scalars_and_images(f"{model_dir}/eval")
    # The test evaluation's figures, as results.json's per-class ones (counted in numpy from the predictions;
    # a class never predicted has no precision there, and 0 in TensorBoard).
    for name in CLASS_NAMES:
        expected = results["per_class"][name]
        assert evaluation[f"precision/{name}"] == [(20, pytest.approx(expected["precision"] or 0.0, abs=1e-6))]
        assert evaluation[f"recall/{name}"] == [(20, pytest.approx(expected["recall"], abs=1e-6))]
    recalls = [evaluation[f"recall/{name}"][0][1] for name in CLASS_NAMES]
    image = images["confusion_matrix/0"][0].numpy()
    assert image.shape == (10 * 16, 10 * 16, 1)
    # The diagonal cell of each true class is its recall, as a share of 255.
    diagonal = [image[16 * i + 8, 16 * i + 8, 0] / 255.0 for i in range(10)]
    assert diagonal == pytest.approx(recalls, abs=1 / 255 + 1e-6)
    # Each row holds the shares of a true class's predictions: they add up to 1.
    rows = image[8::16, 8::16, 0].astype(np.float64) / 255.0
    assert rows.sum(axis=1) == pytest.approx(np.ones(10), abs=10 / 255)
