"""--tta in the test evaluation and in predict.py: a short Fashion run on 2 mirrored CPU replicas with
--tta flip, checked against the export run here on the test images and on their mirror images (NumPy's
flip); --eval-only with flip and crops leaves the export as it was; predict.py --tta flip is the mean of
predict.py on an image and on its flipped copy; bad or forbidden views are refused in one line."""
import contextlib
import csv
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from acquisition.fashion_mnist import CLASS_NAMES, load_split
from input_fns.decode import PIXELS_SIGNATURE
from input_fns.views import apply_view
from pipeline.evaluation_report import EVAL_ONLY_DIR
from pipeline.cli import train_main
from input_fns import CROP_VIEWS
from pipeline.tasks import fashion
from tests.conftest import ROOT, assert_clean_failure

# fp32: the crops' reference below differs from the evaluation by the pixels' rounding, which bf16's 8-bit
# mantissa grows past the tolerance now and then (2.3e-3 once, under --precision auto on an avx512_bf16 CPU).
RUN = ["--batch-size", "16", "--lr-scaling", "none", "--max-steps", "40", "--eval-every-steps", "20",
       "--warm-up-steps", "1", "--bootstrap-resamples", "10", "--seed", "1", "--cpu-replicas", "2",
       "--precision", "fp32"]


def script(name, *argv):
    return subprocess.run([sys.executable, os.path.join(ROOT, "scripts", name), *argv],
                          capture_output=True, text=True, timeout=900)


def figures(probabilities, labels):
    """Returns (accuracy, mean cross-entropy) of `probabilities` against `labels`, probabilities clipped at 1e-7."""
    picked = np.clip(probabilities[np.arange(len(labels)), labels], 1e-7, 1 - 1e-7)
    return np.mean(probabilities.argmax(axis=1) == labels), -np.mean(np.log(picked))


def assert_same_rows(scores, expected, atol):
    """Asserts that the rows of `scores` are those of `expected`, each once, in any order (a mirrored
    evaluation collects its replicas' batches step by step, not in the file's order)."""
    distance = np.abs(scores[:, None, :] - expected[None, :, :]).max(axis=2)
    match = distance.argmin(axis=1)
    assert sorted(match) == list(range(len(expected)))
    assert distance[np.arange(len(scores)), match].max() <= atol


def tree_digest(folder):
    """Returns {relative path: sha256} of every file below `folder`."""
    return {os.path.relpath(os.path.join(parent, n), folder): hashlib.sha256(open(os.path.join(parent, n), "rb")
                                                                             .read()).hexdigest()
            for parent, _, names in os.walk(folder) for n in names}


@pytest.fixture(scope="module")
def run(fashion_data_dir, tmp_path_factory):
    """(results.json, model dir, stdout) of 40 steps on 2 replicas with --tta flip and a float32 .tflite."""
    model_dir = str(tmp_path_factory.mktemp("fashion-tta"))
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):  # in this process: a subprocess would start TensorFlow again
        code = train_main(fashion.TASK, ["--data-dir", fashion_data_dir, "--model-dir", model_dir, *RUN,
                                         "--tta", "flip", "--tflite", "float32"])
    assert code == 0, stdout.getvalue()[-3000:]
    with open(os.path.join(model_dir, "results.json")) as f:
        return json.load(f), model_dir, stdout.getvalue()


@pytest.fixture(scope="module")
def reference(run, fashion_data_dir):
    """(a function from uint8 images [n, 28, 28, 1] to the export's probabilities, the test images, labels)."""
    signature = tf.saved_model.load(run[0]["export_dir"]).signatures[PIXELS_SIGNATURE]
    images, labels = load_split(fashion_data_dir, "test")

    def export(pixels):
        return signature(gray_pixels=tf.constant(pixels))["probabilities"].numpy().astype(np.float64)
    return export, images[..., None], np.asarray(labels, int)


def test_the_flip_view_is_the_model_on_numpy_s_mirror_image(run, reference):
    export, images, labels = reference
    mirrored = images[:, :, ::-1].copy()
    np.testing.assert_allclose(export(apply_view(images, "flip").numpy()), export(mirrored), atol=1e-6)
    recorded = run[0]["tta_views"]
    for view, pixels in (("identity", images), ("flip", mirrored)):
        accuracy, loss = figures(export(pixels), labels)
        assert recorded[view]["accuracy"] == pytest.approx(accuracy, abs=1e-6)
        assert recorded[view]["loss"] == pytest.approx(loss, abs=1e-4)


def test_recorded_accuracy_and_loss_are_those_of_the_two_averaged_probability_sets(run, reference):
    results, model_dir, _ = run
    export, images, labels = reference
    averaged = (export(images) + export(images[:, :, ::-1].copy())) / 2
    accuracy, loss = figures(averaged, labels)
    assert results["tta"] == ["identity", "flip"] and results["eval_examples"] == len(labels) == 200
    assert results["eval_accuracy"] == pytest.approx(accuracy, abs=1e-9)
    assert results["eval_loss"] == pytest.approx(loss, abs=1e-5)
    assert results["tta_views"]["identity"]["accuracy"] != pytest.approx(accuracy, abs=1e-9) or \
        results["tta_views"]["identity"]["loss"] != pytest.approx(loss, abs=1e-5)  # averaging changed something
    with open(os.path.join(model_dir, "test_scores.csv")) as f:  # the report's per-image scores, in test order
        rows = list(csv.reader(f))[1:]
    assert_same_rows(np.array([[float(p) for p in row[2:]] for row in rows]), averaged, 1e-6)


def test_header_summary_and_report_name_the_views(run):
    results, model_dir, stdout = run
    assert "test TTA:      the mean of 2 views: identity, flip (the test evaluation only" in stdout
    assert "test-time augmentation: the mean of 2 views: identity, flip" in stdout
    with open(os.path.join(model_dir, "report.json")) as f:
        assert json.load(f)["tta"] == ["identity", "flip"]
    with open(os.path.join(model_dir, "report.md")) as f:
        assert "mean over 2 views (identity, flip)" in f.read()
    assert results["clinical"]["tta"] == ["identity", "flip"]


def test_eval_only_with_flip_and_crops_averages_seven_views_and_leaves_the_export(run, reference, tmp_path,
                                                                                   fashion_data_dir, capsys):
    results, model_dir, _ = run
    copy = str(tmp_path / "copy")
    shutil.copytree(model_dir, copy)  # the other tests read the run's own report files
    before = tree_digest(results["export_dir"])
    code = train_main(fashion.TASK, ["--data-dir", fashion_data_dir, "--model-dir", copy, *RUN, "--eval-only",
                                     "--tta", "flip,crops"])
    stdout = capsys.readouterr().out
    assert code == 0, stdout[-3000:]
    assert tree_digest(results["export_dir"]) == before
    views = ["identity", "flip", *CROP_VIEWS]
    assert f"the mean of 7 views: {', '.join(views)} (crops of 0.875 of each side)" in stdout
    evaluated = os.path.join(copy, EVAL_ONLY_DIR)  # the training run's report stays, as results.json's
    for name in ("report.json", "report.md", "test_scores.csv"):
        assert open(os.path.join(copy, name), "rb").read() == open(os.path.join(model_dir, name), "rb").read()
    assert os.path.join(evaluated, "report.md") in stdout
    with open(os.path.join(evaluated, "report.json")) as f:
        assert json.load(f)["tta"] == views
    export, images, labels = reference
    averaged = np.mean([export(apply_view(images, view).numpy()) for view in views], axis=0)
    with open(os.path.join(evaluated, "test_scores.csv")) as f:
        rows = list(csv.reader(f))[1:]
    scores = np.array([[float(p) for p in row[2:]] for row in rows])
    scored_labels = np.array([CLASS_NAMES.index(row[1]) for row in rows])
    # The evaluation crops float images in [0, 1]; the export here, uint8 pixels rounded after the resize.
    assert_same_rows(scores, averaged, 2e-3)
    accuracy, loss = figures(scores, scored_labels)
    assert sorted(scored_labels) == sorted(labels) and f"eval:    accuracy {accuracy:.4f}, loss {loss:.4f}" \
        in stdout


def write_pngs(images, folder):
    """Writes each uint8 [28, 28, 1] image as folder/NN.png; returns the paths."""
    os.makedirs(folder)
    paths = [os.path.join(folder, f"{i:02d}.png") for i in range(len(images))]
    for path, image in zip(paths, images):
        Image.fromarray(image[..., 0]).save(path)
    return paths


def predictions(*argv, views=None):
    """Returns {file: probabilities} printed by predict.py --json `argv`, each answer naming the `views` averaged."""
    result = script("predict.py", "--json", *argv)
    assert result.returncode == 0, result.stderr[-3000:]
    answers = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r.get("tta") for r in answers] == [views] * len(answers)
    return {r["file"]: np.array(list(r["probabilities"].values())) for r in answers}


@pytest.mark.parametrize("model", ["export", "tflite"])
def test_predict_tta_flip_is_the_mean_over_the_image_and_its_flipped_copy(run, reference, tmp_path, model):
    results = run[0]
    path = results["export_dir"] if model == "export" else results["tflite"]["files"]["float32"]["file"]
    images = reference[1][:12]
    originals = write_pngs(images, str(tmp_path / "images"))
    flipped = write_pngs(images[:, :, ::-1], str(tmp_path / "flipped"))
    plain = predictions("--model", path, *originals, *flipped)
    averaged = predictions("--model", path, "--tta", "flip", *originals, views=["identity", "flip"])
    for original, mirror in zip(originals, flipped):
        np.testing.assert_allclose(averaged[original], (plain[original] + plain[mirror]) / 2, atol=1e-6)
    assert any(not np.allclose(averaged[o], plain[o], atol=1e-4) for o in originals)  # the flip counted


@pytest.mark.parametrize("command, value, fragment", [
    ("train_fashion.py", "spin", "expected none, or flip"),
    ("train_fashion.py", "flip,flip", "given twice"),
    ("train_oct.py", "flip=vertical", "flip=vertical is not a view this job allows: an upside-down B-scan"),
    ("predict.py", "crops=2", "expected none, or flip"),
])
def test_a_bad_or_forbidden_view_exits_2_in_one_line(tmp_path, command, value, fragment):
    extra = ["--model", str(tmp_path), "x.png"] if command == "predict.py" else ["--model-dir", str(tmp_path / "m")]
    result = script(command, "--tta", value, *extra)
    assert result.returncode == 2
    assert_clean_failure(result, "--tta", fragment)


def test_a_flipped_view_of_a_model_trained_without_flips_is_warned_of():
    from pipeline.tta import untrained_flip
    assert "--tta flip: the model trains without --augment flip" in untrained_flip(("identity", "flip"), [])
    assert "--tta flip_vertical:" in untrained_flip(("identity", "flip_vertical"), [("rotate", 15.0)])
    assert untrained_flip(("identity", "flip"), [("flip", "horizontal")]) is None
    assert untrained_flip(("identity", "crop_centre"), []) is None and untrained_flip((), []) is None
