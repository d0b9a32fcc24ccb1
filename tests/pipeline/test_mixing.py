"""--mixup, --cutmix and --label-smoothing change what trains and nothing that evaluates or serves: only the
training graph holds their ops; the same weights evaluate, predict and export the same with them on or off;
the reported evaluation loss is the plain cross-entropy of the test probabilities; runs on 1 and 2 replicas
(bf16 too) record them in results.json; a resumed run draws what a straight one would; --deterministic
reruns are bitwise equal; and flags that cannot act are refused in one line."""
import csv
import io
import json
import os

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from acquisition import fashion_mnist
from input_fns import synthetic
from input_fns.mixing import mix, smooth_labels
from models.backbones import build_image_classifier
from models.fashion_cnn import build_fashion_cnn
from pipeline import estimator as estimator_lib
from pipeline.cli import run_command, train_main
from pipeline.distribution import build_distribution
from pipeline.flags import build_parser
from pipeline.metrics import CROSS_ENTROPY
from pipeline.mixing import Mixing, mixing_of
from pipeline.roles import run
from pipeline.tasks import FEATURE_KEY, fashion, images as images_task
from serving.export import export_model
from serving.predict import load_predictor
from tests.conftest import FASHION_SAMPLE
from tests.images_data import make_shapes_folder
from tests.pipeline.test_augmentation import random_or_transform_ops
from tests.pipeline.test_determinism import assert_bitwise_equal

ALL = Mixing(mixup=0.2, cutmix=1.0, switch_prob=0.5, label_smoothing=0.1)
MIXING_FLAGS = ["--mixup", "0.2", "--cutmix", "1.0", "--label-smoothing", "0.1"]


def graph_ops(mode, mixing):
    """Returns the op names of the model_fn's graph in `mode`."""
    with tf.Graph().as_default() as graph:
        tf.compat.v1.train.create_global_step()
        estimator = estimator_lib.estimator_from_keras(build_fashion_cnn(1e-3, input_name=FEATURE_KEY),
                                                  tf.estimator.RunConfig(model_dir=None), mixing=mixing)
        estimator._model_fn({FEATURE_KEY: tf.zeros((4, 28, 28, 1))}, tf.zeros((4, 10)), mode)
        return {op.name for op in graph.get_operations()}


def test_only_the_training_graph_holds_mixing_and_smoothing():
    trained = graph_ops(tf.estimator.ModeKeys.TRAIN, ALL)
    assert any(name.startswith("mixing/") for name in trained)
    assert any(name.startswith("label_smoothing/") for name in trained)
    for mode in (tf.estimator.ModeKeys.EVAL, tf.estimator.ModeKeys.PREDICT):
        assert not any(name.startswith(("mixing/", "label_smoothing/")) for name in graph_ops(mode, ALL))
    assert not any(name.startswith("mixing/") for name in graph_ops(tf.estimator.ModeKeys.TRAIN, Mixing()))


def fashion_args(data_dir, model_dir, *flags):
    return build_parser(fashion.TASK).parse_args(
        ["--data-dir", data_dir, "--model-dir", str(model_dir), "--warm-up-steps", "1", "--log-steps", "100",
         "--bootstrap-resamples", "10", "--validation-fraction", "0", *flags])


@pytest.fixture(scope="module")
def smoothed_run(fashion_data_dir, tmp_path_factory):
    """(args, results) of a Fashion sample run with every mixing flag, 1 replica, batch 48 (which does not
    divide the 200 test images: the Estimator's own loss, the mean of its batches' means, is not the
    reported one), at a rate that moves
    the model away from uniform probabilities in its 8 steps (at the scaled default's 7.8e-5 it stayed
    so close that the smoothed loss came within 2e-4 of the plain one in one run)."""
    args = fashion_args(fashion_data_dir, tmp_path_factory.mktemp("smoothed") / "m", "--batch-size", "48",
                        "--max-steps", "8", "--learning-rate", "0.003", "--lr-scaling", "none", *MIXING_FLAGS,
                        "--precision", "fp32")  # the Estimators built here again are float32
    return args, run(fashion.TASK, args)


def scores_of(model_dir):
    """Returns (probabilities, class indices) of test_scores.csv in `model_dir`."""
    with open(os.path.join(model_dir, "test_scores.csv")) as f:
        rows = list(csv.reader(f))
    header, rows = rows[0], rows[1:]
    classes = [name[2:] for name in header[2:]]
    return np.array([[float(v) for v in row[2:]] for row in rows]), np.array([classes.index(row[1]) for row in rows])


def plain_cross_entropy(probabilities, labels):
    clipped = np.clip(probabilities, 1e-7, 1 - 1e-7)  # as Keras's cross-entropy clips
    return -np.log(clipped[np.arange(len(labels)), labels]).mean()


def test_the_evaluation_loss_is_the_plain_cross_entropy_of_the_test_probabilities(smoothed_run):
    args, results = smoothed_run
    probabilities, labels = scores_of(args.model_dir)
    assert len(labels) == results["eval_examples"] == 200
    clipped = np.clip(probabilities, 1e-7, 1 - 1e-7)
    plain = plain_cross_entropy(probabilities, labels)
    smoothed = -((np.eye(10)[labels] * 0.9 + 0.01) * np.log(clipped)).sum(axis=1).mean()
    assert results["eval_loss"] == pytest.approx(plain, rel=1e-5)
    # The smoothed loss, had it leaked, would be told apart: it lies ten times the tolerance above away
    # (the two are equal for uniform probabilities, and close near them: hence the fixture's rate).
    assert abs(smoothed - plain) > 10 * 1e-5 * plain


def fashion_png():
    """Returns the bytes of a PNG of one of the sample's images."""
    images, _ = fashion_mnist.load_split(FASHION_SAMPLE, "test")
    buffer = io.BytesIO()
    Image.fromarray(images[3]).save(buffer, "PNG")
    return buffer.getvalue()


def test_the_same_weights_evaluate_predict_and_export_alike_with_and_without_mixing(smoothed_run, tmp_path):
    args, results = smoothed_run
    data = fashion.TASK.prepare_data(args, args.batch_size)
    outputs = {}
    for name, mixing in (("mixed", mixing_of(args)), ("plain", None)):
        estimator = estimator_lib.estimator_from_keras(fashion.TASK.build_model(args, 1e-3),
                                                  tf.estimator.RunConfig(model_dir=args.model_dir),
                                                  data.class_names, mixing=mixing)
        evaluation = estimator.evaluate(data.eval_input_fn)
        predictions = np.stack([p["probabilities"] for p in estimator.predict(data.eval_input_fn)])
        export = export_model(estimator, data.serving_input_fn, data.class_names, str(tmp_path / name))
        assert random_or_transform_ops(export) == []
        served = [load_predictor(export).classify([fashion_png()])[0] for _ in range(2)]
        outputs[name] = (evaluation, predictions, served)
    (mixed_eval, mixed_pred, mixed_served), (plain_eval, plain_pred, plain_served) = outputs["mixed"], outputs["plain"]
    assert mixed_eval == plain_eval and mixed_eval[CROSS_ENTROPY] == pytest.approx(results["eval_loss"], rel=1e-6)
    assert np.array_equal(mixed_pred, plain_pred) and len(mixed_pred) == 200
    assert all(np.array_equal(mixed_served[0], s) for s in mixed_served[1:] + plain_served)


@pytest.mark.parametrize("replicas, flags", [
    (1, ["--mixup", "0.2", "--label-smoothing", "0.1"]),
    (2, ["--mixup", "0.2", "--cutmix", "1.0", "--mix-switch-prob", "0.3", "--label-smoothing", "0.05",
         "--precision", "bf16"]),
])
def test_runs_on_1_and_2_replicas_record_the_flags(fashion_data_dir, tmp_path, capsys, replicas, flags):
    args = fashion_args(fashion_data_dir, tmp_path / "m", "--batch-size", "16", "--max-steps", "4",
                        "--cpu-replicas", str(replicas), *flags)
    results = run(fashion.TASK, args)
    header = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  mixing:")]
    both = "--cutmix" in flags
    assert results["replicas"] == replicas and results["global_step"] == 4 and np.isfinite(results["eval_loss"])
    assert {k: results[k] for k in ("mixup", "cutmix", "mix_switch_prob", "label_smoothing")} == {
        "mixup": 0.2, "cutmix": 1.0 if both else 0.0, "mix_switch_prob": 0.3 if both else None,
        "label_smoothing": float(flags[flags.index("--label-smoothing") + 1])}
    with open(os.path.join(args.model_dir, "results.json")) as f:
        assert json.load(f)["mixup"] == 0.2
    assert len(header) == 1 and "mixup alpha 0.2" in header[0] and ("cutmix at p=0.3" in header[0]) == both


def test_a_run_without_the_flags_records_them_off(fashion_data_dir, tmp_path, capsys):
    results = run(fashion.TASK, fashion_args(fashion_data_dir, tmp_path / "m", "--synthetic", "--max-steps", "1"))
    assert {k: results[k] for k in ("mixup", "cutmix", "mix_switch_prob", "label_smoothing")} == {
        "mixup": 0.0, "cutmix": 0.0, "mix_switch_prob": None, "label_smoothing": 0.0}
    assert "  mixing:" not in capsys.readouterr().out


class CaptureMixed(tf.estimator.SessionRunHook):
    """Keeps the first replica's mixed images and labels of global step `step`."""

    def __init__(self, step):
        self.step, self.batch = step, None

    def before_run(self, run_context):
        graph = tf.compat.v1.get_default_graph()
        return tf.estimator.SessionRunArgs((tf.compat.v1.train.get_global_step(),
                                            graph.get_tensor_by_name("mixing/mixed_images:0"),
                                            graph.get_tensor_by_name("label_smoothing/smoothed_labels:0")))

    def after_run(self, run_context, run_values):
        step, images, labels = run_values.results
        if step == self.step:
            self.batch = (images, labels)


def train(model_dir, max_steps, hooks=()):
    config = estimator_lib.build_run_config(model_dir, build_distribution(cpu_replicas=2), checkpoint_steps=1,
                                            summary_steps=100, seed=3)
    estimator = estimator_lib.estimator_from_keras(build_fashion_cnn(1e-3, input_name=FEATURE_KEY), config,
                                              augment_seed=11, mixing=ALL)
    estimator.train(synthetic.make_input_fn((28, 28, 1), 10, 8, True), hooks=list(hooks), max_steps=max_steps)


def test_a_resumed_run_draws_what_a_straight_run_draws(tmp_path):
    straight = CaptureMixed(4)
    train(str(tmp_path / "straight"), 6, [straight])
    train(str(tmp_path / "resumed"), 3)
    resumed = CaptureMixed(4)
    train(str(tmp_path / "resumed"), 6, [resumed])
    assert straight.batch is not None and all(np.array_equal(a, b) for a, b in zip(straight.batch, resumed.batch))
    # ... and those are step 4's draws, on replica 0, from seed 11.
    images, labels = synthetic.make_input_fn((28, 28, 1), 10, 8, True)().take(1).get_single_element()

    def drawn(step):
        x, y = mix(images[FEATURE_KEY], labels, ALL.mixup, ALL.cutmix, ALL.switch_prob, 11, step, 0)
        return x.numpy(), smooth_labels(y, ALL.label_smoothing).numpy()
    assert all(np.allclose(a, b, atol=1e-6) for a, b in zip(straight.batch, drawn(4)))
    assert not all(np.allclose(a, b, atol=1e-6) for a, b in zip(straight.batch, drawn(0)))


def test_deterministic_reruns_on_2_replicas_are_bitwise_equal(fashion_data_dir, tmp_path, capsys):
    def train_fashion(name, *flags):
        assert train_main(fashion.TASK, ["--data-dir", fashion_data_dir, "--model-dir", str(tmp_path / name),
                                         "--batch-size", "16", "--cpu-replicas", "2", "--max-steps", "5",
                                         "--deterministic", "--seed", "4", "--warm-up-steps", "0",
                                         "--validation-fraction", "0", "--bootstrap-resamples", "10",
                                         *flags]) == 0
    train_fashion("a", *MIXING_FLAGS)
    train_fashion("b", *MIXING_FLAGS)
    assert_bitwise_equal(tmp_path / "a", tmp_path / "b", 5)
    train_fashion("plain")
    with pytest.raises(AssertionError, match="tensors differ"):  # the mixing did change what trained
        assert_bitwise_equal(tmp_path / "a", tmp_path / "plain", 5)


@pytest.mark.parametrize("flags, fragment", [
    (["--mixup", "0.2", "--mix-switch-prob", "0.3"], "--mix-switch-prob chooses between --mixup and --cutmix"),
    (["--cutmix", "1", "--batch-size", "1"], "--cutmix mixes each image with another of its replica's batch"),
    (["--label-smoothing", "1"], "--label-smoothing: must be from 0 to below 1"),
    (["--mixup", "-0.1"], "--mixup: must be a finite number >= 0"),
    (["--mix-switch-prob", "1.5"], "--mix-switch-prob: must be from 0 to 1"),
])
def test_flags_that_cannot_act_are_refused_in_one_line(flags, fragment, tmp_path, capsys):
    def work(args):
        from pipeline import roles
        roles.run(fashion.TASK, args)
    argv = ["--synthetic", "--model-dir", str(tmp_path / "m"), "--max-steps", "1", *flags]
    try:
        code = run_command(build_parser(fashion.TASK), work, argv)
    except SystemExit as e:  # argparse's own refusal
        code = e.code
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if ": error: " in line]
    assert code == 2 and len(errors) == 1 and fragment in errors[0], err[-2000:]
    assert not os.path.exists(tmp_path / "m")  # refused before the data is read or the model dir made


def test_class_weights_mix_and_smooth_linearly():
    weights = [1.0, 3.0, 0.5]
    loss = build_image_classifier("small_cnn", 3, (32, 32), 1, class_weights=weights).loss
    p = tf.constant([[0.2, 0.5, 0.3]])
    one_hot = np.eye(3, dtype=np.float32)
    each = [float(loss(tf.constant(one_hot[[c]]), p)[0]) for c in range(3)]
    np.testing.assert_allclose(each, -np.array(weights) * np.log([0.2, 0.5, 0.3]), rtol=1e-5)
    lam = 0.3
    mixed = float(loss(tf.constant([[lam, 1 - lam, 0.0]]), p)[0])
    assert mixed == pytest.approx(lam * each[0] + (1 - lam) * each[1], rel=1e-5)
    smoothed = float(loss(tf.constant(one_hot[[1]] * 0.9 + 0.1 / 3), p)[0])
    assert smoothed == pytest.approx(0.9 * each[1] + 0.1 / 3 * sum(each), rel=1e-5)


def test_the_images_job_trains_balanced_class_weights_with_mixing(tmp_path):
    root = make_shapes_folder(str(tmp_path / "shapes"), per_class=8)
    for name in sorted(os.listdir(os.path.join(root, "square")))[:4]:  # 4 squares against 8 of each other class
        os.remove(os.path.join(root, "square", name))
    args = build_parser(images_task.TASK).parse_args(
        ["--data-dir", root, "--model-dir", str(tmp_path / "m"), "--image-size", "32", "--batch-size", "8",
         "--max-steps", "3", "--class-weight", "balanced", "--validation-fraction", "0", "--warm-up-steps", "1",
         "--bootstrap-resamples", "10", *MIXING_FLAGS])
    results = run(images_task.TASK, args)
    assert results["global_step"] == 3 and results["class_weights"] and np.isfinite(results["eval_loss"])
    # The weights are training's: the evaluation loss is each test image's cross-entropy, unweighted.
    assert results["eval_loss"] == pytest.approx(plain_cross_entropy(*scores_of(args.model_dir)), rel=1e-5)
    assert (results["mixup"], results["cutmix"], results["label_smoothing"]) == (0.2, 1.0, 0.1)
