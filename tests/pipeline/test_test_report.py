"""The test report of an OCT run on 2 replicas: figures from the evaluation's own scores, which
are predict.py's scores for the same images; report files, TensorBoard images, Grad-CAM on the
VGG16 export, and the report's bad flags."""
import collections
import csv
import glob
import json
import os
import re
import subprocess
import sys
import types

import numpy as np
import pytest
import tensorflow as tf

from pipeline.errors import FlagError
from pipeline.evaluation_report import check_positive_classes
from pipeline.flags import build_parser
from pipeline.roles import run
from pipeline.tasks.oct import TASK
from reporting import calibration
from serving.gradcam import GradCam
from tests.conftest import OCT_CLASSES, ROOT, assert_clean_failure, make_oct_tree


@pytest.fixture(scope="module")
def oct_run(oct_sample, tmp_path_factory):
    """(results, model dir, test files) of VGG16 at 64 px trained 2 steps on 2 CPU replicas, --deterministic: in
    this process a run's first weights are otherwise drawn from where the earlier tests' runs left TensorFlow's
    random state (a command line's are the same in each run), and some of those draws left Grad-CAM's maps
    all zero after 2 steps (test_grad_cam_on_the_vgg16_export... failed once, after other files on its worker)."""
    tree = make_oct_tree(oct_sample, str(tmp_path_factory.mktemp("data") / "OCT2017"))
    model_dir = str(tmp_path_factory.mktemp("model"))
    args = build_parser(TASK).parse_args([
        "--data-dir", os.path.dirname(tree), "--model-dir", model_dir, "--image-size", "64", "--weights", "none",
        "--batch-size", "4", "--max-steps", "2", "--cpu-replicas", "2", "--bootstrap-resamples", "200",
        "--validation-fraction", "0", "--deterministic"])  # the report is the test split's: no validation, nor a best model
    return run(TASK, args), model_dir, sorted(glob.glob(os.path.join(tree, "test", "*", "*.jpeg")))


def read_scores(model_dir):
    with open(os.path.join(model_dir, "test_scores.csv")) as f:
        return {row["image"]: row for row in csv.DictReader(f)}


def test_the_report_comes_from_every_test_image_once_and_is_written_beside_the_results(oct_run):
    results, model_dir, test_files = oct_run
    clinical = results["clinical"]
    with open(os.path.join(model_dir, "report.json")) as f:
        assert json.load(f) == clinical
    scores = read_scores(model_dir)
    assert sorted(scores) == test_files  # each test image once, by its file name
    assert all(row["label"] == os.path.basename(os.path.dirname(name)) for name, row in scores.items())
    assert [sum(row) for row in results["confusion_matrix"]] == [6, 6, 6, 6] == \
        [clinical["per_class"][n]["positives"] for n in OCT_CLASSES]
    assert clinical["accuracy"]["value"] == pytest.approx(results["eval_accuracy"])
    patients = {re.search(r"-(\d+)-\d+\.jpeg$", f).group(1) for f in test_files}
    assert clinical["bootstrap"] == {"method": "percentile", "resamples": 200, "seed": 0, "unit": "group",
                                     "groups": len(patients), "group_pattern": TASK.group_pattern}
    referral = clinical["referral"]
    assert referral["positive_classes"] == ["CNV", "DME"] and referral["positives"] == 12
    assert referral["at_specificity"]["target"] == 0.95
    with open(os.path.join(model_dir, "report.md")) as f:
        table = f.read()
    assert "| CNV | 6 |" in table and "## Referral: CNV or DME against the rest" in table
    for name in ("confusion_matrix.png", "roc_curves.png"):
        with open(os.path.join(model_dir, name), "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    tags = set()
    for events in glob.glob(os.path.join(model_dir, "eval", "events.*")):
        for event in tf.compat.v1.train.summary_iterator(events):
            tags |= {v.tag for v in event.summary.value if v.HasField("image")}
    assert {"test_report/confusion_matrix", "test_report/roc_curves"} <= tags
    right = round(results["eval_accuracy"] * 24)
    examples = results["test_examples"]  # with their heatmaps, up to 8 right and 8 wrong
    assert len(examples) == min(8, right) + min(8, 24 - right) and {e["tag"] for e in examples} <= tags
    assert all((e["label"] == e["predicted"]) == e["tag"].startswith("test_report/examples/right/")
               and e["file"] in test_files for e in examples)


def test_the_calibration_figures_are_reporting_calibration_s_on_the_test_scores(oct_run):
    _, model_dir, test_files = oct_run
    with open(os.path.join(model_dir, "results.json")) as f:
        figures = json.load(f)["clinical"]["calibration"]
    rows = read_scores(model_dir).values()
    probabilities = np.array([[float(row[f"p_{n}"]) for n in OCT_CLASSES] for row in rows])
    labels = np.array([OCT_CLASSES.index(row["label"]) for row in rows])
    confidence, correct = calibration.top_label(probabilities, labels)
    assert figures["ece"]["value"] == pytest.approx(calibration.ece(confidence, correct), abs=1e-12)
    assert figures["nll"]["value"] == pytest.approx(calibration.nll(probabilities, labels), abs=1e-12)
    assert figures["brier"]["value"] == pytest.approx(calibration.brier(probabilities, labels), abs=1e-12)
    assert figures["bins"] == {"scheme": "equal-count", "requested": 15, "used": calibration.bins_used(confidence)}
    assert figures["reliability"] == pytest.approx(calibration.reliability(confidence, correct))
    assert all(len(figures[key]["ci"]) == 2 for key in ("ece", "nll", "brier"))
    for i, name in enumerate(OCT_CLASSES):
        assert figures["per_class"][name]["ece"]["value"] == pytest.approx(
            calibration.ece(*calibration.one_against_rest(probabilities, labels, i)), abs=1e-12)
    with open(os.path.join(model_dir, "report.md")) as f:
        assert "## Calibration" in f.read()
    with open(os.path.join(model_dir, "reliability_diagram.png"), "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    tags = {v.tag for events in glob.glob(os.path.join(model_dir, "eval", "events.*"))
            for event in tf.compat.v1.train.summary_iterator(events) for v in event.summary.value}
    assert "test_report/reliability_diagram" in tags


def test_the_collected_scores_are_predict_py_s_scores_and_it_explains_them(oct_run, tmp_path):
    results, model_dir, test_files = oct_run
    out = tmp_path / "heatmaps"
    predicted = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "predict.py"), "--model",
                                results["export_dir"], "--json", "--explain", str(out), *test_files],
                               capture_output=True, text=True, timeout=300)
    assert predicted.returncode == 0, predicted.stderr[-2000:]
    scores = read_scores(model_dir)
    lines = [json.loads(line) for line in predicted.stdout.splitlines()]
    assert [line["file"] for line in lines] == test_files
    for line in lines:
        collected = [float(scores[line["file"]][f"p_{n}"]) for n in OCT_CLASSES]
        np.testing.assert_allclose([line["probabilities"][n] for n in OCT_CLASSES], collected, atol=1e-5)
        assert line["explained_class"] == line["class"] and os.path.isfile(line["heatmap"])
    assert len(os.listdir(out)) == len(test_files)


def test_grad_cam_on_the_vgg16_export_is_a_finite_varying_4x4_map(oct_run):
    results, _, test_files = oct_run
    gradcam = GradCam(results["export_dir"])
    contents = []
    for path in test_files[::3]:
        with open(path, "rb") as f:
            contents.append(f.read())
    _, _, heatmaps = gradcam.explain(contents)
    assert gradcam.layer == "block5_conv3" and heatmaps.shape == (len(contents), 4, 4)
    assert np.isfinite(heatmaps).all() and all(h.std() > 0 for h in heatmaps)


def script(name, *argv):
    return subprocess.run([sys.executable, os.path.join(ROOT, "scripts", name), *argv],
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("flag, value, fragment", [
    ("--at-specificity", "1.5", "must be from 0 to 1"),
    ("--positive-classes", "CNV,", "expected comma-separated names"),
    ("--positive-classes", "CNV,DME,CNV", "names CNV twice; give each name once"),
    ("--bootstrap-resamples", "2", "must be from 10 to 1000000, got 2"),
])
def test_bad_report_flags_are_refused_at_once(tmp_path, flag, value, fragment):
    result = script("train_oct.py", "--synthetic", "--model-dir", str(tmp_path / "m"), flag, value)
    assert result.returncode == 2 and fragment in assert_clean_failure(result, flag)
    assert not (tmp_path / "m").exists()


def test_a_referral_class_the_data_lacks_is_a_flag_error(oct_sample, tmp_path):
    tree = make_oct_tree(oct_sample, str(tmp_path / "data" / "OCT2017"), test_per_class=2)
    result = script("train_oct.py", "--data-dir", os.path.dirname(tree), "--model-dir", str(tmp_path / "m"),
                    "--image-size", "32", "--weights", "none", "--positive-classes", "CNV,AMD")
    assert result.returncode == 2
    assert "--positive-classes names AMD, not a class of this data" in assert_clean_failure(result)
    assert not glob.glob(str(tmp_path / "m" / "*.index"))  # nothing trained


def test_naming_every_class_positive_is_a_flag_error():
    check_positive_classes(types.SimpleNamespace(positive_classes=("CNV", "DME")), OCT_CLASSES)
    with pytest.raises(FlagError, match="names every class, leaving no negatives"):
        check_positive_classes(types.SimpleNamespace(positive_classes=tuple(reversed(OCT_CLASSES))), OCT_CLASSES)


def test_predict_refuses_an_unknown_explained_class(oct_run, tmp_path):
    results, _, test_files = oct_run
    result = script("predict.py", "--model", results["export_dir"], "--explain", str(tmp_path / "h"),
                    "--explain-class", "AMD", test_files[0])
    assert result.returncode == 2
    assert "--explain-class AMD is not a class of this model" in assert_clean_failure(result)
    assert result.stdout == ""  # refused before any image is classified (it printed every answer first)


def test_heatmaps_written_into_the_folder_classified_are_not_classified_by_the_next_run(oct_run, tmp_path):
    """A rerun of predict.py --explain DIR/heat DIR classified its own heatmaps, and wrote heatmaps of them."""
    import shutil
    results, _, test_files = oct_run
    folder = tmp_path / "scans"
    folder.mkdir()
    for f in test_files[:2]:
        shutil.copy(f, folder)
    for _ in range(2):
        result = script("predict.py", "--model", results["export_dir"], "--json", "--explain", str(folder / "heat"),
                        str(folder))
        assert result.returncode == 0, result.stderr[-2000:]
        assert sorted(json.loads(line)["file"] for line in result.stdout.splitlines()) == \
            sorted(str(folder / os.path.basename(f)) for f in test_files[:2])
    assert len(os.listdir(folder / "heat")) == 2


def test_two_sets_of_images_written_in_one_second_both_reach_tensorboard(tmp_path):
    from pipeline.evaluation_report import write_images
    png = tf.io.encode_png(tf.zeros((2, 3, 3), tf.uint8)).numpy()
    # The report's figures, then its examples: in CI both came in one second, and the second events
    # file took the first's name.
    write_images(str(tmp_path), {"confusion_matrix.png": png}, 7)
    write_images(str(tmp_path), {"right-0": png}, 7, prefix="test_report/examples/")
    tags = {value.tag for events in glob.glob(str(tmp_path / "events.*"))
            for event in tf.compat.v1.train.summary_iterator(events) for value in event.summary.value}
    assert tags == {"test_report/confusion_matrix", "test_report/examples/right-0"}


def test_a_report_made_again_at_a_step_replaces_that_step_s_images_and_keeps_earlier_steps(tmp_path):
    from pipeline.evaluation_report import remove_report_events, write_images
    png = tf.io.encode_png(tf.zeros((2, 3, 3), tf.uint8)).numpy()
    write_images(str(tmp_path), {"confusion_matrix.png": png}, 5)  # a finished run's report, resumed since
    for _ in range(2):  # killed after its report's events, before results.json: the relaunch reports again
        remove_report_events(str(tmp_path), 9)
        write_images(str(tmp_path), {"confusion_matrix.png": png}, 9)
        write_images(str(tmp_path), {"right-0": png}, 9, prefix="test_report/examples/")
    steps = collections.Counter((event.step, value.tag) for events in glob.glob(str(tmp_path / "events.*"))
                                for event in tf.compat.v1.train.summary_iterator(events) for value in event.summary.value)
    assert steps == {(5, "test_report/confusion_matrix"): 1, (9, "test_report/confusion_matrix"): 1,
                     (9, "test_report/examples/right-0"): 1}


def test_the_bootstrap_resamples_the_groups_group_by_names_else_the_task_s():
    from pipeline import evaluation_report
    from pipeline.tasks.images import TASK as IMAGES
    scores = types.SimpleNamespace(named=True, keys=["/d/cat/p1-a.png", "/d/dog/p1-b.png", "/d/cat/p2-c.png"])
    groups, pattern = evaluation_report._groups(IMAGES, types.SimpleNamespace(group_by=r"^(p\d)-"), scores)
    assert groups.tolist() == [0, 0, 1] and pattern == r"^(p\d)-"
    assert evaluation_report._groups(IMAGES, types.SimpleNamespace(group_by=None), scores) == (None, None)
    patients = types.SimpleNamespace(named=True, keys=["/t/CNV/CNV-17-1.jpeg", "/t/DME/DME-17-2.jpeg"])
    groups, pattern = evaluation_report._groups(TASK, types.SimpleNamespace(), patients)  # OCT: the patient
    assert groups.tolist() == [0, 0] and pattern == TASK.group_pattern


def test_the_headline_warns_when_the_temperature_made_the_test_nll_worse():
    """21 validation images, all classified right, fitted T=0.146: the test NLL went from 0.377 to 2.095 and the
    summary showed only the after-figure."""
    from pipeline.run_output import _calibration_line
    figures = {"ece": {"value": 0.48, "ci": [0.389, 0.631], "bias_corrected": 0.479}, "bins": {"used": 6},
               "nll": {"value": 2.095}, "brier": {"value": 0.68},
               "temperature": {"temperature": 0.146, "validation_images": 21,
                               "test_nll": {"before": 0.377, "after": 2.095}}}
    worse = _calibration_line(figures).splitlines()
    assert worse[0].endswith("; temperature 0.146, fitted on the 21 validation images (test NLL 0.377 before it)")
    assert worse[1].strip().startswith("WARNING: the temperature made the test NLL worse (0.377 to 2.095)")
    figures["temperature"]["test_nll"]["after"] = 0.301
    assert len(_calibration_line(figures).splitlines()) == 1
    figures["temperature"].update(temperature=20.0, at_bound=True)  # said in report.md only, before
    at_bound = _calibration_line(figures).splitlines()
    assert len(at_bound) == 2 and "WARNING: the temperature lies at a bound of its search (0.05 to 20)" in at_bound[1]
