"""--calibrate temperature and the validation split's threshold, on a short OCT run with a validation
split: the temperature is the one that minimises the validation NLL, the export made after it
serves the scaled probabilities, and the referral threshold is chosen on the validation split and
applied to the test split. Also the flag's refusals."""
import csv
import glob
import json
import logging
import os
import shutil
import subprocess
import sys
import types

import numpy as np
import pytest

from pipeline.errors import FlagError
from pipeline.flags import build_parser
from pipeline.roles import run
from pipeline.tasks.oct import TASK
from pipeline.evaluation_report import calibration_warning, check_calibration
from pipeline.validation.best import SCORES_SUFFIX, read_scores
from reporting import calibration
from reporting.clinical import at_specificity
from serving.calibrated import CALIBRATION_FILE
from serving.gradcam import GradCam
from serving.predict import load_predictor, resolve_export_dir
from tests.conftest import OCT_CLASSES, ROOT, assert_clean_failure, make_oct_tree


RUN = ["--image-size", "32", "--weights", "none", "--batch-size", "4", "--max-steps", "6", "--eval-every-steps", "3",
       "--learning-rate", "0.003", "--validation-fraction", "0.2", "--bootstrap-resamples", "100", "--warm-up-steps",
       "1", "--precision", "fp32"]  # float32 tolerances


@pytest.fixture(scope="module")
def calibrated_run(oct_sample, tmp_path_factory):
    """(results, model dir, validation files, test files) of VGG16 at 32 px trained 6 steps, validated
    every 3 on a fifth of the training scans, with --calibrate temperature."""
    tree = make_oct_tree(oct_sample, str(tmp_path_factory.mktemp("data") / "OCT2017"))
    model_dir = str(tmp_path_factory.mktemp("model"))
    args = build_parser(TASK).parse_args(["--data-dir", os.path.dirname(tree), "--model-dir", model_dir, *RUN,
                                          "--calibrate", "temperature", "--at-specificity", "0.8"])
    results = run(TASK, args)
    with open(os.path.join(model_dir, "validation_files.txt")) as f:
        validation_files = f.read().splitlines()
    return results, model_dir, validation_files, sorted(glob.glob(os.path.join(tree, "test", "*", "*.jpeg")))


def classify(export_dir, files):
    """Returns (the export's probabilities [n, classes] for `files`, their labels from the class folders)."""
    contents = []
    for path in files:
        with open(path, "rb") as f:
            contents.append(f.read())
    probabilities = load_predictor(export_dir).classify(contents)[0].astype(np.float64)
    return probabilities, np.array([OCT_CLASSES.index(os.path.basename(os.path.dirname(p))) for p in files])


def test_the_temperature_minimises_the_validation_nll_of_the_best_checkpoint(calibrated_run):
    results, _, validation_files, _ = calibrated_run
    scaling = results["clinical"]["calibration"]["temperature"]
    probabilities, labels = classify(results["best"]["export_dir"], validation_files)  # unscaled
    assert scaling["fitted_on"] == "validation" and scaling["validation_images"] == len(validation_files)
    assert scaling["temperature"] == pytest.approx(calibration.fit_temperature(probabilities, labels), rel=1e-3)
    assert scaling["validation_nll"]["before"] == pytest.approx(calibration.nll(probabilities, labels), abs=1e-5)
    assert scaling["validation_nll"]["after"] < scaling["validation_nll"]["before"]


def test_the_export_made_after_the_fit_serves_the_scaled_probabilities(calibrated_run):
    results, model_dir, _, test_files = calibrated_run
    temperature = results["clinical"]["calibration"]["temperature"]["temperature"]
    scaled_export, best_export = results["export_dir"], results["best"]["export_dir"]
    assert scaled_export != best_export and resolve_export_dir(model_dir) == scaled_export  # predict.py's choice
    with open(os.path.join(scaled_export, "assets.extra", CALIBRATION_FILE)) as f:
        assert json.load(f) == {"method": "temperature", "temperature": temperature}
    served, labels = classify(scaled_export, test_files)
    unscaled, _ = classify(best_export, test_files)
    np.testing.assert_allclose(served, calibration.apply_temperature(unscaled, temperature), atol=1e-5)
    assert np.abs(served - unscaled).max() > 1e-4  # the scaling shows
    with open(os.path.join(model_dir, "test_scores.csv")) as f:
        rows = {row["image"]: row for row in csv.DictReader(f)}
    reported = np.array([[float(rows[p][f"p_{n}"]) for n in OCT_CLASSES] for p in test_files])
    np.testing.assert_allclose(reported, served, atol=1e-5)  # the report's figures are of the served ones
    assert results["clinical"]["calibration"]["nll"]["value"] == pytest.approx(calibration.nll(reported, labels))
    assert results["clinical"]["calibration"]["temperature"]["test_nll"]["before"] == pytest.approx(
        calibration.nll(unscaled, labels), abs=1e-5)


def test_a_finish_again_without_calibrate_serves_the_export_its_results_name(calibrated_run, tmp_path):
    """Finished again without --calibrate (its evaluations meet a new --stop-at-accuracy): results.json named the
    best's unscaled export while predict.py served the newer scaled one the first finish left."""
    results, model_dir, _, test_files = calibrated_run
    again = str(tmp_path / "again")
    shutil.copytree(model_dir, again)
    data_dir = test_files[0].rsplit(os.sep, 4)[0]  # <data dir>/OCT2017/test/<class>/<scan>
    refinished = run(TASK, build_parser(TASK).parse_args([
        "--data-dir", data_dir, "--model-dir", again, *RUN, "--max-steps", "12", "--stop-at-accuracy", "0.01"]))
    assert refinished["global_step"] == results["global_step"] and refinished["stopped_because"] != "max_steps"
    served = resolve_export_dir(again)
    assert refinished["export_dir"] == served and not os.path.exists(os.path.join(served, "assets.extra",
                                                                                  CALIBRATION_FILE))


def test_grad_cam_explains_the_scaled_export_as_the_unscaled_one(calibrated_run):
    results, _, _, test_files = calibrated_run
    contents = []
    for path in test_files[::4]:
        with open(path, "rb") as f:
            contents.append(f.read())
    maps = {}
    for key in ("scaled", "unscaled"):
        gradcam = GradCam(results["export_dir"] if key == "scaled" else results["best"]["export_dir"])
        _, targets, heatmaps = gradcam.explain(contents)
        gradcam.close()
        maps[key] = (targets, heatmaps / np.maximum(heatmaps.max(axis=(1, 2), keepdims=True), 1e-30))
    assert (maps["scaled"][0] == maps["unscaled"][0]).all()  # the same predicted classes explained
    np.testing.assert_allclose(maps["scaled"][1], maps["unscaled"][1], atol=1e-4)  # the logits divided by T


def test_the_referral_threshold_is_chosen_on_the_validation_split_and_applied_to_the_test_split(calibrated_run):
    results, model_dir, validation_files, test_files = calibrated_run
    point = results["clinical"]["referral"]["at_specificity_validation"]
    probabilities, labels = classify(results["export_dir"], validation_files)  # scaled, as the report's
    chosen = at_specificity(probabilities[:, :2].sum(1), labels <= 1, 0.8)
    assert point["chosen_on"] == "validation" and point["threshold"] == pytest.approx(chosen["threshold"], rel=1e-5)
    assert point["validation"]["specificity"] == chosen["specificity"] >= 0.8
    with open(os.path.join(model_dir, "test_scores.csv")) as f:
        rows = list(csv.DictReader(f))
    scores = np.array([float(r["p_CNV"]) + float(r["p_DME"]) for r in rows])
    positive = np.array([r["label"] in ("CNV", "DME") for r in rows])
    assert point["test"]["sensitivity"]["value"] == pytest.approx(np.mean(scores[positive] >= point["threshold"]))
    assert point["test"]["specificity"]["value"] == pytest.approx(np.mean(scores[~positive] < point["threshold"]))
    with open(os.path.join(model_dir, "report.md")) as f:
        text = f.read()
    assert f"chosen on the {len(validation_files)} validation images" in text and "Temperature scaling" in text


def test_calibration_without_a_validation_split_is_refused():
    data = types.SimpleNamespace(validation_input_fn=None, class_names=OCT_CLASSES, source="real")
    with pytest.raises(FlagError, match="fits its temperature on the validation split, never the test split"):
        check_calibration(types.SimpleNamespace(calibrate="temperature"), data)
    check_calibration(types.SimpleNamespace(calibrate="none"), data)
    synthetic = types.SimpleNamespace(validation_input_fn=None, class_names=OCT_CLASSES, source="synthetic")
    with pytest.raises(FlagError, match="synthetic data gets no test report; drop --calibrate, or --synthetic$"):
        check_calibration(types.SimpleNamespace(calibrate="temperature"), synthetic)


@pytest.mark.parametrize("argv, fragment", [
    (["--calibrate", "platt"], "invalid choice: 'platt'"),
    # not 'give it one (--validation-fraction above 0)', which --synthetic then refused
    (["--calibrate", "temperature"], "synthetic data gets no test report; drop --calibrate, or --synthetic"),
])
def test_bad_calibration_flags_are_one_line_and_exit_2(tmp_path, argv, fragment):
    result = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "train_oct.py"), "--synthetic",
                             "--model-dir", str(tmp_path / "m"), *argv], capture_output=True, text=True, timeout=300)
    assert result.returncode == 2 and fragment in assert_clean_failure(result)
    assert not glob.glob(str(tmp_path / "m" / "*.index"))  # nothing trained


@pytest.mark.parametrize("calibrate, images, warned", [("temperature", 10, True), ("temperature", 29, True),
                                                       ("temperature", 30, False), ("none", 10, False)])
def test_a_temperature_fitted_on_few_validation_images_is_warned_about(calibrate, images, warned):
    warning = calibration_warning(types.SimpleNamespace(calibrate=calibrate),
                                  types.SimpleNamespace(num_validation_examples=images))
    assert (warning is not None) == warned
    if warned:
        assert f"only {images} validation images" in warning and "--validation-fraction" in warning



def test_the_report_reads_the_validation_scores_kept_beside_the_best_checkpoint(calibrated_run):
    """The best checkpoint's validation during training kept each image's scores: the report's threshold
    and temperature come from them, with no second evaluation of the validation split."""
    results, model_dir, validation_files, _ = calibrated_run
    kept = read_scores(os.path.join(model_dir, "best", f"model.ckpt-{results['best']['step']}"))
    assert kept is not None and len(kept.labels) == len(validation_files)
    probabilities, labels = classify(results["best"]["export_dir"], validation_files)

    def by_label_then_scores(p, l):  # the validation input carries no file names: compared as sets of rows
        order = np.lexsort((*p.T[::-1], l))
        return p[order], l[order]
    (kept_p, kept_l), (export_p, export_l) = by_label_then_scores(kept.probabilities, kept.labels), \
        by_label_then_scores(probabilities, labels)
    assert (kept_l == export_l).all()
    np.testing.assert_allclose(kept_p, export_p, atol=1e-5)
    assert not os.path.exists(os.path.join(model_dir, "eval_report_validation"))  # not evaluated again
    kept_files = glob.glob(os.path.join(model_dir, "best", "*" + SCORES_SUFFIX))
    assert [os.path.basename(f) for f in kept_files] == [f"model.ckpt-{results['best']['step']}{SCORES_SUFFIX}"]


def test_kept_validation_scores_of_other_weights_settings_or_images_are_evaluated_again(tmp_path, caplog):
    from pipeline.evaluation_report import kept_scores, scores_made_with
    from pipeline.validation.best import BestKeeper, write_scores
    (tmp_path / "model.ckpt-3.index").write_bytes(b"the weights of step 3")
    args = types.SimpleNamespace(positive_classes=None, calibrate="temperature", precision="bf16", xla=False,
                                 image_size=64, decode="full")
    data = types.SimpleNamespace(class_names=OCT_CLASSES, source="real", num_validation_examples=5)
    rng = np.random.default_rng(0)
    scores = types.SimpleNamespace(probabilities=rng.dirichlet(np.ones(4), 5), labels=np.arange(5) % 4,
                                   keys=[f"image {i}" for i in range(5)], named=False)
    keeper = BestKeeper(str(tmp_path), scores_made_with=scores_made_with(args, data))
    keeper.keep({"step": 3}, str(tmp_path / "model.ckpt-3"), scores)
    best = str(tmp_path / "best" / "model.ckpt-3")
    np.testing.assert_array_equal(kept_scores(args, data, best).probabilities, scores.probabilities)

    def refused(args, data, differs):
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            assert kept_scores(args, data, best) is None
        assert f"differ from this evaluation's ({differs}): the validation split is evaluated again" in caplog.text
    refused(types.SimpleNamespace(**{**vars(args), "precision": "fp32"}), data, "precision")  # --precision auto
    refused(types.SimpleNamespace(**{**vars(args), "decode": "reduced"}), data, "decode")
    refused(args, types.SimpleNamespace(**{**vars(data), "num_validation_examples": 6}), "images")
    (tmp_path / "best" / "model.ckpt-3.index").write_bytes(b"the weights of another step 3")
    refused(args, data, "checkpoint")
    # A step-3 checkpoint kept again without scores (a run resumed from before it): the old scores go.
    (tmp_path / "model.ckpt-3.index").write_bytes(b"the weights of another step 3")
    BestKeeper(str(tmp_path)).keep({"step": 3}, str(tmp_path / "model.ckpt-3"))
    assert not os.path.exists(best + SCORES_SUFFIX) and os.path.exists(best + ".index")
    write_scores(best, types.SimpleNamespace(**{**vars(scores), "probabilities": scores.probabilities * np.nan}),
                 scores_made_with(args, data))
    refused(args, data, "scores")


def tflite_and_export_probabilities(tflite_file, export_dir):
    """Returns the probabilities of the .tflite file and of the export's pixels signature for the same
    three random images."""
    import tensorflow as tf
    from input_fns.decode import PIXELS_SIGNATURE
    signature = tf.saved_model.load(export_dir).signatures[PIXELS_SIGNATURE]
    name, spec = next(iter(signature.structured_input_signature[1].items()))
    images = np.random.default_rng(0).integers(0, 256, (3, *spec.shape[1:]), dtype=np.uint8)
    runner = tf.lite.Interpreter(model_path=tflite_file).get_signature_runner(PIXELS_SIGNATURE)
    got = np.concatenate([runner(**{name: image[None]})["probabilities"] for image in images])
    return got, signature(**{name: tf.constant(images)})["probabilities"].numpy()


def test_the_device_files_are_of_the_served_scaled_export(calibrated_run, caplog):
    """--tflite converts the export predict.py serves: under --eval-only the one results.json names (the
    scaled one; it converted the unscaled best before), and with --calibrate the one made after the fit
    (it converted the export made before it); a damaged file of the best's validation scores is read
    no more. Last in this file: --eval-only writes its own report."""
    results, model_dir, _, test_files = calibrated_run
    common = ["--data-dir", os.path.dirname(os.path.dirname(os.path.dirname(test_files[0]))), "--model-dir",
              model_dir, "--image-size", "32", "--weights", "none", "--batch-size", "4", "--validation-fraction",
              "0.2", "--bootstrap-resamples", "100", "--eval-only", "--tflite", "float32"]
    recorded = run(TASK, build_parser(TASK).parse_args(common))
    assert recorded["export_dir"] == results["export_dir"] != results["best"]["export_dir"]
    assert recorded["tflite"]["dir"].endswith(os.sep + os.path.basename(results["export_dir"]))
    got, served = tflite_and_export_probabilities(recorded["tflite"]["files"]["float32"]["file"],
                                                  results["export_dir"])
    np.testing.assert_allclose(got, served, atol=1e-4)
    kept = os.path.join(model_dir, "best", f"model.ckpt-{results['best']['step']}{SCORES_SUFFIX}")
    with open(kept, "r+b") as f:  # damaged: read no more, the validation split is evaluated again
        f.truncate(100)
    with caplog.at_level(logging.WARNING):
        scaled_again = run(TASK, build_parser(TASK).parse_args(common + ["--calibrate", "temperature"]))
    assert f"cannot read {kept}" in caplog.text and os.path.isdir(os.path.join(model_dir, "eval_only", "eval_report_validation"))
    assert scaled_again["clinical"]["calibration"]["temperature"]["temperature"] == pytest.approx(
        results["clinical"]["calibration"]["temperature"]["temperature"], rel=1e-4)  # the kept scores' fit
    assert scaled_again["export_dir"] not in (results["export_dir"], results["best"]["export_dir"])
    # Its export is the evaluation's, beside its report: predict.py still serves what training exported.
    assert scaled_again["export_dir"].startswith(os.path.join(model_dir, "eval_only", "export") + os.sep)
    assert resolve_export_dir(model_dir) == results["export_dir"]
    assert scaled_again["tflite"]["dir"].endswith(os.sep + os.path.basename(scaled_again["export_dir"]))
