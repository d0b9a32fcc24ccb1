"""The Fashion-MNIST job's export as a user meets it: a short run on the real sample exports its best
model, and predict.py answers from it for PNG and JPEG files of any size and colour and for raw
784-byte .gray files, as the run's own test evaluation scored the same images."""
import contextlib
import csv
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

from acquisition.fashion_mnist import CLASS_NAMES, NUM_SHARDS, load_split
from input_fns.decode import PIXELS_SIGNATURE
from pipeline.cli import train_main
from pipeline.tasks import fashion
from tests.conftest import ROOT, assert_clean_failure

CLASSES = list(CLASS_NAMES)


def script(name, *argv):
    return subprocess.run([sys.executable, os.path.join(ROOT, "scripts", name), *argv],
                          capture_output=True, text=True, timeout=600)


def png(pixels, mode="L", scale=1):
    """Returns PNG bytes of uint8 `pixels` [28, 28], in `mode`, enlarged `scale` times (nearest)."""
    image = Image.fromarray(pixels).convert(mode)
    if scale != 1:
        image = image.resize((28 * scale, 28 * scale), Image.NEAREST)
    buffer = io.BytesIO()
    image.save(buffer, "PNG")
    return buffer.getvalue()


@pytest.fixture(scope="module")
def fashion_run(fashion_data_dir, tmp_path_factory):
    """(results, model dir, run's stdout) of 40 steps of batch 16 on the real sample's 718 training
    images, validated every 20 steps on the 82 held out, so the best model is exported as it is found."""
    model_dir = str(tmp_path_factory.mktemp("fashion-model"))
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):  # in this process: a subprocess would start TensorFlow again
        code = train_main(fashion.TASK, ["--data-dir", fashion_data_dir, "--model-dir", model_dir, "--batch-size",
                                         "16", "--lr-scaling", "none", "--max-steps", "40", "--eval-every-steps",
                                         "20", "--warm-up-steps", "1", "--bootstrap-resamples", "10", "--seed", "1"])
    assert code == 0, stdout.getvalue()[-3000:]
    with open(os.path.join(model_dir, "results.json")) as f:
        return json.load(f), model_dir, stdout.getvalue()


@pytest.fixture(scope="module")
def test_images(fashion_data_dir):
    """(uint8 [200, 28, 28] images, labels) of the run's test split, in the IDX files' order."""
    return load_split(fashion_data_dir, "test")


def evaluation_scores(model_dir, count):
    """Returns (probabilities [count, 10], label names) the run's test evaluation collected, in the
    IDX files' order: it read the test shards one after the other, each holding every n-th image."""
    with open(os.path.join(model_dir, "test_scores.csv")) as f:
        rows = list(csv.DictReader(f))
    order = [i for shard in range(NUM_SHARDS["test"]) for i in range(shard, count, NUM_SHARDS["test"])]
    probabilities, labels = np.zeros((count, len(CLASSES))), [None] * count
    for row, index in zip(rows, order):
        probabilities[index] = [float(row[f"p_{name}"]) for name in CLASSES]
        labels[index] = row["label"]
    return probabilities, labels


def test_the_best_model_is_exported_with_both_signatures(fashion_run):
    results, model_dir, stdout = fashion_run
    export_dir = results["export_dir"]
    assert export_dir == results["best"]["export_dir"] and results["eval_step"] == results["best"]["step"]
    assert os.path.dirname(export_dir) == os.path.join(model_dir, "export")
    assert os.path.isfile(os.path.join(export_dir, "saved_model.pb"))
    assert f"  export:  {export_dir}" in stdout
    with open(os.path.join(export_dir, "assets.extra", "class_names.txt")) as f:
        assert f.read().splitlines() == CLASSES
    signatures = tf.saved_model.load(export_dir).signatures
    assert set(signatures) == {"serving_default", PIXELS_SIGNATURE}
    files = signatures["serving_default"].structured_input_signature[1]
    pixels = signatures[PIXELS_SIGNATURE].structured_input_signature[1]
    assert {k: (s.dtype, s.shape.as_list()) for k, s in files.items()} == {"image_bytes": (tf.string, [None])}
    assert {k: (s.dtype, s.shape.as_list()) for k, s in pixels.items()} == {
        "gray_pixels": (tf.uint8, [None, 28, 28, 1])}


def test_the_export_scores_pngs_and_raw_pixels_as_the_test_evaluation_did(fashion_run, test_images):
    results, model_dir, _ = fashion_run
    images, labels = test_images
    signatures = tf.saved_model.load(results["export_dir"]).signatures
    from_pngs = signatures["serving_default"](image_bytes=tf.constant([png(image) for image in images]))
    from_pixels = signatures[PIXELS_SIGNATURE](gray_pixels=tf.constant(images[..., None]))
    # The same pixels, decoded from a PNG or given raw, are the same model input: the same answer, bit for bit.
    np.testing.assert_array_equal(from_pngs["probabilities"].numpy(), from_pixels["probabilities"].numpy())
    np.testing.assert_array_equal(from_pngs["class_name"].numpy(), from_pixels["class_name"].numpy())
    # ... and the test evaluation's own scores (the Estimator on the test records, another graph and batch).
    evaluated, evaluated_labels = evaluation_scores(model_dir, len(labels))
    assert evaluated_labels == [CLASSES[label] for label in labels]  # the order is the IDX files'
    np.testing.assert_allclose(from_pngs["probabilities"].numpy(), evaluated, atol=1e-5)
    predicted = [CLASSES.index(name.decode()) for name in from_pngs["class_name"].numpy()]
    assert predicted == evaluated.argmax(axis=1).tolist()
    assert np.mean(np.array(predicted) == labels) == pytest.approx(results["eval_accuracy"])
    assert len(set(predicted)) > 2  # a model that learned something, not one class for every image


def test_predict_py_answers_for_pngs_jpegs_and_gray_files_and_explains_them(fashion_run, test_images, tmp_path):
    results, model_dir, _ = fashion_run
    images, _ = test_images
    evaluated, _ = evaluation_scores(model_dir, len(images))
    pngs, grays = tmp_path / "pngs", tmp_path / "grays"
    pngs.mkdir(), grays.mkdir()
    chosen = range(12)
    for i in chosen:
        (pngs / f"{i:02d}.png").write_bytes(png(images[i]))
        (grays / f"{i:02d}.gray").write_bytes(images[i].tobytes())  # 784 bytes, as in the IDX file
    big_rgb = tmp_path / "big-rgb.png"  # 56x56 RGB: converted to gray and resized back to the same pixels
    big_rgb.write_bytes(png(images[0], "RGB", scale=2))
    photo = tmp_path / "photo.jpg"
    Image.fromarray(images[1]).convert("RGB").resize((90, 70)).save(photo, "JPEG")
    result = script("predict.py", "--model", model_dir, "--json", "--explain", str(tmp_path / "heatmaps"),
                    str(pngs), str(grays), str(big_rgb), str(photo))
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [line["file"] for line in lines] == ([str(pngs / f"{i:02d}.png") for i in chosen]
                                                + [str(grays / f"{i:02d}.gray") for i in chosen]
                                                + [str(big_rgb), str(photo)])
    by_png, by_gray = lines[:len(chosen)], lines[len(chosen):2 * len(chosen)]
    for i, from_png, from_gray in zip(chosen, by_png, by_gray):
        assert from_png["class"] == CLASSES[evaluated[i].argmax()]  # what the test evaluation predicted
        np.testing.assert_allclose([from_png["probabilities"][n] for n in CLASSES], evaluated[i], atol=1e-5)
        assert from_gray["probabilities"] == from_png["probabilities"]  # exactly
        assert from_gray["class"] == from_png["class"] == from_png["explained_class"]
        assert os.path.isfile(from_png["heatmap"]) and os.path.isfile(from_gray["heatmap"])
    # the 56x56 RGB PNG: the same pixels, classified in another batch (exact only where the kernels do not
    # depend on the batch's size: TensorFlow's Eigen convolutions, on CPUs without AVX-512, differ by 1e-7)
    np.testing.assert_allclose([lines[-2]["probabilities"][n] for n in CLASSES],
                               [by_png[0]["probabilities"][n] for n in CLASSES], rtol=0, atol=1e-6)
    assert lines[-1]["class"] in CLASSES and sum(lines[-1]["probabilities"].values()) == pytest.approx(1, abs=1e-4)
    assert len(os.listdir(tmp_path / "heatmaps")) == len(lines)


def test_predict_py_on_the_model_dir_of_an_unfinished_run_says_its_answers_come_from_a_mid_run_export(
        fashion_run, test_images, tmp_path):
    """A run stopped, killed or still training has exported its best model so far: predict.py answered from it
    without a word that training had not finished."""
    _, model_dir, _ = fashion_run
    image = tmp_path / "one.png"
    image.write_bytes(png(test_images[0][0]))
    finished = script("predict.py", "--model", model_dir, str(image))
    assert finished.returncode == 0 and "not finished" not in finished.stderr, finished.stderr[-3000:]
    unfinished = tmp_path / "unfinished"
    shutil.copytree(model_dir, unfinished)
    os.remove(unfinished / "results.json")  # as a run has it until it finishes
    (export,) = os.listdir(unfinished / "export")
    source = (unfinished / "export" / export / "assets.extra" / "exported_checkpoint.txt").read_text().split()[0]
    answered = script("predict.py", "--model", str(unfinished), str(image))
    assert answered.returncode == 0, answered.stderr[-3000:]
    assert answered.stdout == finished.stdout  # the same export's answer
    (line,) = [l for l in answered.stderr.splitlines() if "not finished" in l]
    assert f" W {unfinished} holds a run that has not finished training" in line
    assert f"these answers come from its export of {source}, made while it trained" in line
    exported = script("predict.py", "--model", str(unfinished / "export"), str(image))  # the export, named
    assert exported.returncode == 0 and "not finished" not in exported.stderr, exported.stderr[-3000:]


def test_heatmaps_that_cannot_be_written_leave_the_predictions_printed(fashion_run, test_images, tmp_path):
    # A full disk under --explain lost every prediction: they were printed after the heatmaps.
    _, model_dir, _ = fashion_run
    images, _ = test_images
    for i in range(3):
        (tmp_path / f"{i}.png").write_bytes(png(images[i]))
    (tmp_path / "afile").write_text("")
    result = script("predict.py", "--model", model_dir, "--explain", str(tmp_path / "afile" / "heatmaps"),
                    *[str(tmp_path / f"{i}.png") for i in range(3)])
    assert result.returncode == 1
    assert_clean_failure(result, "Not a directory", "afile")
    assert [line.split(":")[0] for line in result.stdout.splitlines()] == [str(tmp_path / f"{i}.png") for i in range(3)]


def test_files_predict_py_cannot_take_are_named_with_the_fix(fashion_run, test_images, tmp_path):
    results, model_dir, _ = fashion_run
    images, _ = test_images
    raw = tmp_path / "shirt.raw"  # the right 784 bytes, but not named .gray: taken for an image file
    raw.write_bytes(images[0].tobytes())
    short = tmp_path / "short.gray"
    short.write_bytes(images[0].tobytes()[:783])
    good = tmp_path / "good.gray"
    good.write_bytes(images[0].tobytes())
    result = script("predict.py", "--model", results["export_dir"], str(raw), str(short), str(good))
    assert result.returncode == 1 and "Traceback" not in result.stdout + result.stderr, result.stderr[-3000:]
    raw_line, short_line, good_line = result.stdout.splitlines()
    assert raw_line == (f"{raw}: error: is not a JPEG, PNG, BMP or GIF image; pass a JPEG, PNG, BMP or GIF file, "
                        "or, for raw pixels, a file named *.gray holding one 28x28 gray image's pixels, a byte each, "
                        "row by row (as in Fashion-MNIST's IDX files)")
    assert short_line.startswith(f"{short}: error: is 783 bytes; a .gray file for this model holds exactly 784: ")
    assert any(good_line.startswith(f"{good}: {name}  (") for name in CLASSES), good_line


def test_an_export_whose_weights_are_cut_short_is_one_line(fashion_run, test_images, tmp_path):
    results, _, _ = fashion_run
    images, _ = test_images
    export = tmp_path / "export"
    shutil.copytree(results["export_dir"], export)
    data = next((export / "variables").glob("variables.data-*"))
    data.write_bytes(data.read_bytes()[:1000])  # a copy cut short
    good = tmp_path / "good.gray"
    good.write_bytes(images[0].tobytes())
    result = script("predict.py", "--model", str(export), str(good))
    assert result.returncode == 1
    assert_clean_failure(result, f"the export {export} cannot be loaded (", "copy the whole export folder again")
