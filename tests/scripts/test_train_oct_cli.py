"""The OCT job as a user runs it: train, evaluate, export, predict; and its bad inputs."""
import json
import os
import shutil
import subprocess
import sys

import pytest
import tensorflow as tf

from tests.conftest import OCT_CLASSES, ROOT, assert_clean_failure, make_oct_tree

SMALL = ["--image-size", "32", "--weights", "none", "--batch-size", "8", "--warm-up-steps", "1"]


def script(name, *argv, env=None):
    return subprocess.run([sys.executable, os.path.join(ROOT, "scripts", name), *argv],
                          capture_output=True, text=True, timeout=600, env=env)


def scripts_at_once(*commands):
    """Runs each (name, *argv) as `script` does, all at the same time (their start-ups overlap);
    returns their CompletedProcesses in order."""
    started = [subprocess.Popen([sys.executable, os.path.join(ROOT, "scripts", name), *argv], text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE) for name, *argv in commands]
    done = []
    for process in started:
        stdout, stderr = process.communicate(timeout=600)
        done.append(subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr))
    return done


@pytest.fixture()
def tree(oct_sample, tmp_path):
    return make_oct_tree(oct_sample, str(tmp_path / "data" / "OCT2017"))


def test_train_evaluate_export_and_predict_on_two_replicas(tree, tmp_path):
    truncated = os.path.join(tree, "train", "DME", "truncated.jpeg")
    with open(os.path.join(tree, "test", "DME", sorted(os.listdir(os.path.join(tree, "test", "DME")))[0]), "rb") as f:
        scan_bytes = f.read()
    with open(truncated, "wb") as f:
        f.write(scan_bytes[:5000])
    model_dir = tmp_path / "model"
    result = script("train_oct.py", "--data-dir", os.path.dirname(tree), "--model-dir", str(model_dir),
                    "--cpu-replicas", "2", "--max-steps", "6", "--on-bad-image", "skip", *SMALL)
    assert result.returncode == 0, result.stderr
    results = json.loads((model_dir / "results.json").read_text())
    assert results["global_step"] == 6 and results["replicas"] == 2 and results["global_batch_size"] == 16
    # The default validation split, by patient, from the 105 good training scans; its best model is exported.
    held = (model_dir / "validation_files.txt").read_text().splitlines()
    assert results["train_examples"] + results["validation_examples"] == 105 and results["eval_examples"] == 24
    assert len(held) == results["validation_examples"] > 0 and truncated not in held
    assert results["export_dir"] == results["best"]["export_dir"] and results["eval_step"] == results["best"]["step"]
    assert results["skipped_files"] == [truncated]
    assert results["skipped_file_problems"] == {truncated: "is truncated (no JPEG end marker)"}
    assert "skipped: 1 files" in result.stdout
    matrix = results["confusion_matrix"]
    assert [sum(row) for row in matrix] == [6, 6, 6, 6]
    assert sum(matrix[i][i] for i in range(4)) / 24 == pytest.approx(results["eval_accuracy"])
    assert set(results["per_class"]) == set(OCT_CLASSES)
    assert os.path.isfile(os.path.join(results["export_dir"], "saved_model.pb"))

    real_scan = os.path.join(tree, "test", "NORMAL", sorted(os.listdir(os.path.join(tree, "test", "NORMAL")))[0])
    predicted, text, upside_down = scripts_at_once(
        ("predict.py", "--model", str(model_dir / "export"), "--json", real_scan, truncated),
        ("predict.py", "--model", results["export_dir"], real_scan),
        ("predict.py", "--model", results["export_dir"], "--tta", "flip=vertical", real_scan))
    assert predicted.returncode == 1  # one of the two files is truncated
    good, bad = [json.loads(line) for line in predicted.stdout.splitlines()]
    assert good["file"] == real_scan and good["class"] in OCT_CLASSES
    assert sum(good["probabilities"].values()) == pytest.approx(1.0, abs=1e-4)
    assert good["class"] == max(good["probabilities"], key=good["probabilities"].get)
    assert bad == {"file": truncated, "error": "is truncated (no JPEG end marker)"}
    assert text.returncode == 0 and text.stdout.startswith(f"{real_scan}: {good['class']}  (CNV ")
    # The export says which views its job refuses, as train_oct.py --tta does (it averaged them in).
    assert upside_down.returncode == 2 and not upside_down.stdout
    assert_clean_failure(upside_down, f"--tta flip=vertical is a view the job that trained {results['export_dir']} "
                                      "refuses: an upside-down B-scan shows the retina's layers in an order no scan "
                                      "has; leave it out")

    # What a TF Serving or saved_model_cli client gets: the probabilities and the class name.
    serving = tf.saved_model.load(results["export_dir"]).signatures["serving_default"]
    with open(real_scan, "rb") as f:
        outputs = serving(jpeg_bytes=tf.constant([f.read()]))
    assert set(outputs) == {"probabilities", "class_name"}
    assert outputs["class_name"].numpy().tolist() == [good["class"].encode()]
    assert outputs["probabilities"].numpy()[0].tolist() == pytest.approx(list(good["probabilities"].values()))


def test_prepared_shards_train_through_the_same_script(tree, tmp_path):
    records = tmp_path / "records"
    prepared = script("prepare_oct.py", "--data-dir", os.path.dirname(tree), "--out", str(records),
                      "--image-size", "32")
    assert prepared.returncode == 0, prepared.stderr
    assert "wrote 105 training and 24 test images at 32x32" in prepared.stdout
    model_dir = tmp_path / "model"
    # The run with another image size, and one asking for a validation split (the shards have no file names
    # to split by patient), fail on their own model dirs while this one trains, with no validation split.
    result, wrong_size, split = scripts_at_once(
        ("train_oct.py", "--records-dir", str(records), "--model-dir", str(model_dir), "--max-steps", "3", *SMALL),
        ("train_oct.py", "--records-dir", str(records), "--model-dir", str(tmp_path / "m2"), "--image-size", "64",
         "--weights", "none"),
        ("train_oct.py", "--records-dir", str(records), "--model-dir", str(tmp_path / "m3"),
         "--validation-fraction", "0.1", *SMALL))
    assert result.returncode == 0, result.stderr
    results = json.loads((model_dir / "results.json").read_text())
    assert results["data_source"] == "real (prepared shards)" and results["eval_examples"] == 24
    assert results["train_examples"] == 105 and results["best"] is None and results["validation_examples"] == 0
    assert "--records-dir's shards hold no file names" in assert_clean_failure(split)
    assert [sum(row) for row in results["confusion_matrix"]] == [6, 6, 6, 6]
    assert "pass --image-size 32" in assert_clean_failure(wrong_size)


def test_bad_images_and_folders_stop_before_training_naming_the_problem(tree, oct_sample, tmp_path):
    with open(os.path.join(tree, "test", "CNV", "broken.jpeg"), "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n not a jpeg")
    other = make_oct_tree(oct_sample, str(tmp_path / "other" / "OCT2017"))  # the two runs at once: a tree each
    shutil.copytree(os.path.join(other, "test", "CNV"), os.path.join(other, "test", "AMD"))
    bad_image, bad_folder = scripts_at_once(
        ("train_oct.py", "--data-dir", os.path.dirname(tree), "--model-dir", str(tmp_path / "m"), *SMALL),
        ("train_oct.py", "--data-dir", os.path.dirname(other), "--model-dir", str(tmp_path / "m2"), *SMALL))
    assert "broken.jpeg is not a JPEG file" in assert_clean_failure(bad_image)
    assert "--on-bad-image=skip" in assert_clean_failure(bad_image)
    assert "unknown class folder(s) AMD" in assert_clean_failure(bad_folder)
    assert not (tmp_path / "m" / "checkpoint").exists() and not (tmp_path / "m2" / "checkpoint").exists()


def test_no_data_and_no_kaggle_credentials(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAGGLE")}
    env.update(HOME=str(tmp_path), KAGGLE_CONFIG_DIR=str(tmp_path / ".kaggle"))
    result = script("train_oct.py", "--data-dir", str(tmp_path / "oct"), "--model-dir", str(tmp_path / "m"),
                    *SMALL, env=env)
    line = assert_clean_failure(result)
    assert "no Kaggle credentials" in line and "kaggle.json" in line and "--data-dir" in line


def test_a_synthetic_runs_export_predicts_and_a_resume_with_another_image_size_is_one_line(oct_sample, tmp_path):
    model_dir = tmp_path / "model"
    trained = script("train_oct.py", "--synthetic", "--model-dir", str(model_dir), "--max-steps", "2", *SMALL)
    assert trained.returncode == 0, trained.stderr[-2000:]
    scan = os.path.join(oct_sample, "DME", sorted(os.listdir(os.path.join(oct_sample, "DME")))[0])
    exports, results = os.listdir(model_dir / "export"), (model_dir / "results.json").read_bytes()
    # Predicting reads the export while the same command is run again, which must leave it as it is.
    predicted, again = scripts_at_once(
        ("predict.py", "--model", str(model_dir / "export"), "--json", scan),
        ("train_oct.py", "--synthetic", "--model-dir", str(model_dir), "--max-steps", "2", *SMALL))
    assert predicted.returncode == 0, predicted.stderr[-2000:]
    assert json.loads(predicted.stdout)["class"] in OCT_CLASSES
    assert again.returncode == 0 and "already finished at global step 2" in again.stdout
    assert os.listdir(model_dir / "export") == exports and (model_dir / "results.json").read_bytes() == results

    resumed = script("train_oct.py", "--synthetic", "--model-dir", str(model_dir), "--max-steps", "4",
                     "--image-size", "64", "--weights", "none", "--batch-size", "8")
    assert_clean_failure(resumed, f"--image-size 64: the checkpoints in {model_dir} were trained at --image-size 32",
                         "resume (or evaluate) with --image-size 32")
    assert resumed.returncode == 2  # a flag the record contradicts (training_progress.json)
