"""--init-from through the scripts, as the two-stage transfer recipe runs it: a run trains, and a new run in a
model dir of its own starts from its weights (every one: averaged by --ema, BatchNorm statistics, on two
replicas, in a cluster relaunched after a start stopped early) with other trainable layers; resumed, it reads
its own checkpoints; the flag's misuses are refused in one line, the other run's folder untouched (a run of other
classes too, stopped before its results, relaunched or not). And --weights PATH's BatchNorm statistics reach the
first checkpoint (they began at 0 and 1 before)."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from models.scratch import scratch_network
from pipeline.ema import shadow_key
from pipeline.model_dir import read_checkpoint
from tests.conftest import ROOT, assert_clean_failure
from tests.images_data import make_shapes_folder

IMAGES = ["--model", "small_resnet", "--image-size", "32", "--batch-size", "8", "--warm-up-steps", "1",
          "--bootstrap-resamples", "20"]


def script(name, *argv):
    return subprocess.run([sys.executable, os.path.join(ROOT, "scripts", name), *map(str, argv)],
                          capture_output=True, text=True, timeout=600)


def checkpoint(prefix):
    """Returns {key: value} of the checkpoint `prefix`."""
    reader = read_checkpoint(str(prefix))
    return {key: reader.get_tensor(key) for key in reader.get_variable_to_shape_map()}


def model_weights(values):
    """Returns the checkpoint's model weights by key: no optimizer slots, step, shadows or object graph."""
    skip = ("OPTIMIZER_SLOT", "/Adam", "Adam/", "training/", "global_step", "_CHECKPOINTABLE_OBJECT_GRAPH")
    return {k: v for k, v in values.items()
            if not any(s in k for s in skip) and not k.startswith(("optimizer/", "ema/"))}


def files_of(folder):
    return {os.path.relpath(os.path.join(d, f), folder): open(os.path.join(d, f), "rb").read()
            for d, _, files in os.walk(folder) for f in files}


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    return make_shapes_folder(str(tmp_path_factory.mktemp("pictures") / "shapes"), per_class=20)


@pytest.fixture(scope="module")
def images_head(shapes, tmp_path_factory):
    """A finished images run of small_resnet (BatchNorm) that trained its head alone, 4 steps."""
    model_dir = tmp_path_factory.mktemp("images") / "head"
    result = script("train_images.py", "--data-dir", shapes, "--model-dir", model_dir, "--max-steps", 4,
                    "--trainable-layers", 0, *IMAGES)
    assert result.returncode == 0, result.stderr[-3000:]
    return model_dir


@pytest.fixture(scope="module")
def fashion_head(fashion_data_dir, tmp_path_factory):
    """A finished Fashion run with --ema that validated once (its best is its final step)."""
    model_dir = tmp_path_factory.mktemp("head") / "run"
    result = script("train_fashion.py", "--data-dir", fashion_data_dir, "--model-dir", model_dir, "--max-steps", 6,
                    "--batch-size", 16, "--ema", "0.9", "--eval-every-steps", 6, "--bootstrap-resamples", 20,
                    "--seed", 1)
    assert result.returncode == 0, result.stderr[-3000:]
    return model_dir


def test_a_new_run_starts_from_the_averaged_best_weights_and_a_resume_reads_its_own(fashion_data_dir, fashion_head,
                                                                                   tmp_path):
    before = files_of(fashion_head)
    model_dir = tmp_path / "fine"
    # A start stopped before its first checkpoint left model_to_estimator's first weights (another run's here):
    # model_to_estimator writes them only where there are none, and they would win over --init-from's.
    shutil.copytree(fashion_head / "keras", model_dir / "keras")
    first = script("train_fashion.py", "--data-dir", fashion_data_dir, "--model-dir", model_dir, "--max-steps", 2,
                   "--batch-size", 16, "--bootstrap-resamples", 20, "--init-from", fashion_head)
    assert first.returncode == 0, first.stderr[-3000:]
    best = fashion_head / "best" / "model.ckpt-6"
    assert (f"starting from the weights of {best} (step 6, its best on validation, its --ema average) (--init-from)"
            in first.stdout)
    source, started = checkpoint(best), model_weights(checkpoint(model_dir / "model.ckpt-0"))
    assert len(started) == 10
    for key, value in started.items():  # each the average, not the raw weight
        np.testing.assert_array_equal(value, source[shadow_key(key)], err_msg=key)
        assert not np.array_equal(value, source[key]), key
    assert checkpoint(model_dir / "model.ckpt-0")["estimator_global_step/.ATTRIBUTES/VARIABLE_VALUE"] == 0
    recorded = {"model_dir": str(fashion_head), "checkpoint": str(best), "step": 6,
                "chosen": "its best on validation", "averaged": True}
    assert json.loads((model_dir / "results.json").read_text())["init_from"] == recorded
    assert json.loads((model_dir / "training_progress.json").read_text())["runs"][0]["init_from"] == recorded

    # Resumed to a later step with --init-from naming another folder: it is not read, and says so.
    resumed = script("train_fashion.py", "--data-dir", fashion_data_dir, "--model-dir", model_dir, "--max-steps", 3,
                     "--batch-size", 16, "--bootstrap-resamples", 20, "--init-from", tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming from step 2" in resumed.stdout
    assert (f"--init-from {tmp_path} is not read: {model_dir} holds checkpoints (to step 2), which it goes on "
            f"from (it started from {best})") in resumed.stderr
    assert json.loads((model_dir / "results.json").read_text())["init_from"] == recorded
    assert files_of(fashion_head) == before  # the other run's folder is only read


def test_a_cluster_relaunched_with_init_from_after_a_start_stopped_early_starts_from_those_weights(
        fashion_data_dir, fashion_head, tmp_path):
    # The first launch, without --init-from, was stopped before its first checkpoint: its first weights stay in
    # keras/ (those of the head run here, recorded as made without --init-from). The relaunch adds --init-from;
    # each task builds its Estimator on the model dir in turn, and the first must not take them.
    model_dir = tmp_path / "fine"
    shutil.copytree(fashion_head / "keras", model_dir / "keras")
    launch = subprocess.run(
        [sys.executable, os.path.join(ROOT, "scripts", "launch_local_cluster.py"), "--workers", "1", "--",
         sys.executable, os.path.join(ROOT, "scripts", "train_fashion.py"), "--strategy", "multi_worker_mirrored",
         "--data-dir", fashion_data_dir, "--model-dir", str(model_dir), "--max-steps", "2", "--batch-size", "16",
         "--validation-fraction", "0", "--bootstrap-resamples", "20", "--init-from", str(fashion_head)],
        capture_output=True, text=True, timeout=600)
    assert launch.returncode == 0, launch.stdout[-3000:]
    source = checkpoint(fashion_head / "best" / "model.ckpt-6")
    started = model_weights(checkpoint(model_dir / "model.ckpt-0"))
    assert len(started) == 10
    for key, value in started.items():
        np.testing.assert_array_equal(value, source[shadow_key(key)], err_msg=key)


def test_fine_tuning_more_layers_of_a_batch_norm_network_on_two_replicas(shapes, images_head, tmp_path):
    fine = script("train_images.py", "--data-dir", shapes, "--model-dir", tmp_path / "fine", "--max-steps", 2,
                  "--trainable-layers", 6, "--learning-rate", "1e-4", "--cpu-replicas", 2,
                  "--init-from", images_head, *IMAGES)
    assert fine.returncode == 0, fine.stderr[-3000:]
    source = model_weights(checkpoint(images_head / "best" / "model.ckpt-4"))
    started = model_weights(checkpoint(tmp_path / "fine" / "model.ckpt-0"))
    assert sorted(started) == sorted(source) and any("moving_variance" in key for key in source)
    for key in source:
        np.testing.assert_array_equal(started[key], source[key], err_msg=key)
    results = json.loads((tmp_path / "fine" / "results.json").read_text())
    assert results["trainable_layers"] == 6 and results["init_from"]["step"] == 4
    model_line = next(line for line in fine.stdout.splitlines() if line.startswith("  model:"))
    assert model_line.endswith("every weight from --init-from's checkpoint, the head and the backbone's last 6 layers "
                               "trainable"), model_line


@pytest.mark.parametrize("flags, words", [
    (["--init-from", "{missing}"], "--init-from {missing}: no such folder"),
    (["--init-from", "{head}", "--eval-only"], "--init-from starts a new run's training"),
    (["--init-from", "{model_dir}"], "is this run's own --model-dir"),
    (["--init-from", "{head}", "--model", "small_cnn"],  # (stage 2 without stage 1's --model)
     "--init-from {head} was trained with --model small_resnet (its training_progress.json), and this run builds "
     "--model small_cnn, which its weights cannot fit; pass --model small_resnet"),
    (["--init-from", "{head}", "--split-seed", "7"], "--init-from {head} trained on"),  # test images it learned
    (["--init-from", "{head}", "--validation-fraction", "0.3"],  # validation images it learned: taken, before
     "of this run's 15 validation images"),
])
def test_misuses_are_refused_in_one_line_leaving_both_folders_as_they_were(shapes, images_head, tmp_path, flags,
                                                                          words):
    head = images_head
    before = files_of(head)
    model_dir = tmp_path / "new"
    names = {"missing": tmp_path / "missing", "head": head, "model_dir": model_dir}
    result = script("train_images.py", "--data-dir", shapes, "--model-dir", model_dir, "--max-steps", 2, *IMAGES,
                    *[flag.format(**names) for flag in flags])
    assert result.returncode == 2
    assert_clean_failure(result, words.format(**names))
    assert "model dir:" not in result.stdout + result.stderr  # refused before the run's header
    assert files_of(head) == before
    assert not model_dir.exists() or not [name for name in os.listdir(model_dir) if name.startswith("model.ckpt")]


def test_a_run_of_other_classes_stopped_before_its_results_is_refused(shapes, images_head, tmp_path):
    # As many classes under other names: the checkpoint fits, so only the run's records can tell. Stopped before
    # its results.json, it still has split/split.json, written before it trained.
    head = tmp_path / "head"
    shutil.copytree(images_head, head)
    (head / "results.json").unlink()
    renamed = tmp_path / "renamed"
    classes = sorted(name for name in os.listdir(shapes) if os.path.isdir(os.path.join(shapes, name)))
    for i, name in enumerate(classes):
        shutil.copytree(os.path.join(shapes, name), renamed / f"kind{i}")
    words = (f"--init-from {head} was trained on the classes {', '.join(classes)}, and this run's data has "
             f"{', '.join(f'kind{i}' for i in range(len(classes)))}")
    result = script("train_images.py", "--data-dir", renamed, "--model-dir", tmp_path / "new", "--max-steps", 2,
                    *IMAGES, "--init-from", head)
    assert result.returncode == 2
    assert_clean_failure(result, words)

    # Relaunched with --init-from added after a start stopped before its first checkpoint, which kept its split.
    stopped = tmp_path / "stopped"
    first = script("train_images.py", "--data-dir", renamed, "--model-dir", stopped, "--max-steps", 1, *IMAGES)
    assert first.returncode == 0, first.stderr[-3000:]
    for name in os.listdir(stopped):
        if name.startswith("model.ckpt") or name == "checkpoint":
            os.remove(stopped / name)
    assert (stopped / "split" / "split.json").exists()
    result = script("train_images.py", "--data-dir", renamed, "--model-dir", stopped, "--max-steps", 2, *IMAGES,
                    "--init-from", head)
    assert result.returncode == 2
    assert_clean_failure(result, words)


def test_weights_from_a_file_reach_the_first_checkpoint_batch_norm_statistics_too(shapes, tmp_path):
    # A no-top small_resnet weights file, as --weights PATH takes, its BatchNorm statistics not 0 and 1.
    images = tf.keras.Input((32, 32, 3), dtype=tf.uint8, name="image")
    base = scratch_network("small_resnet", images)
    statistics = {}
    for i, layer in enumerate(l for l in base.layers if isinstance(l, tf.keras.layers.BatchNormalization)):
        layer.moving_mean.assign(np.full(layer.moving_mean.shape, 0.1 * (i + 1), np.float32))
        layer.moving_variance.assign(np.full(layer.moving_variance.shape, 1.5 + i, np.float32))
        statistics.update({f"{layer.name}/moving_mean": layer.moving_mean.numpy(),
                           f"{layer.name}/moving_variance": layer.moving_variance.numpy()})
    weights_file = tmp_path / "small_resnet_notop.h5"
    base.save_weights(str(weights_file))
    result = script("train_images.py", "--data-dir", shapes, "--model-dir", tmp_path / "run", "--max-steps", 1,
                    "--weights", weights_file, *IMAGES)
    assert result.returncode == 0, result.stderr[-3000:]
    started = checkpoint(tmp_path / "run" / "model.ckpt-0")
    assert len(statistics) >= 10
    for key, value in statistics.items():
        np.testing.assert_array_equal(started[key], value, err_msg=key)
