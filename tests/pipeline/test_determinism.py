"""--deterministic: the same seed gives bitwise-equal checkpoints, on 1 replica and on 2, with
--augment, and across a kill -9 and a resume (the resumed input goes on where its checkpoint stood)."""
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import tensorflow as tf
from tensorflow.python.framework import config as tf_config

from pipeline.cli import train_main
from pipeline.tasks.fashion import TASK
from tests.conftest import ROOT


def checkpoint_tensors(model_dir, step):
    """Returns {name: bytes} of every tensor in the model dir's checkpoint of `step` (not the
    serialized object graph, metadata that is no trained value)."""
    reader = tf.train.load_checkpoint(os.path.join(model_dir, f"model.ckpt-{step}"))
    return {name: np.asarray(reader.get_tensor(name)).tobytes() for name in reader.get_variable_to_shape_map()
            if name != "_CHECKPOINTABLE_OBJECT_GRAPH"}


def assert_bitwise_equal(dir_a, dir_b, step):
    a, b = checkpoint_tensors(dir_a, step), checkpoint_tensors(dir_b, step)
    assert a.keys() == b.keys() and len(a) > 5
    differing = [name for name in a if a[name] != b[name]]
    assert not differing, f"{len(differing)} tensors differ at step {step}, e.g. {differing[:2]}"


def train(data_dir, model_dir, *flags):
    assert train_main(TASK, ["--data-dir", data_dir, "--model-dir", str(model_dir), "--batch-size", "16",
                             "--deterministic", "--warm-up-steps", "0", "--log-steps", "100", *flags]) == 0


def test_a_run_killed_with_sigkill_and_resumed_equals_a_straight_run(fashion_data_dir, tmp_path, capsys):
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    common = ["--seed", "7", "--batch-size", "128", "--checkpoint-steps", "30", "--validation-fraction", "0"]
    train(fashion_data_dir, straight, *common, "--max-steps", "60")
    command = [sys.executable, os.path.join(ROOT, "scripts", "train_fashion.py"), "--data-dir", fashion_data_dir,
               "--model-dir", str(killed), "--deterministic", "--warm-up-steps", "0", "--log-steps", "100", *common,
               "--max-steps", "60"]
    with subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) as process:
        # The Saver writes the meta graph last: a kill before it would forget checkpoint 30 (model_dir's
        # forget_checkpoint_cut_before_its_meta_graph) and the resume would start from scratch.
        while not (killed / "model.ckpt-30.meta").exists() and process.poll() is None:
            time.sleep(0.02)
        process.kill()  # at a step between the checkpoints of 30 and 60
        assert process.wait() == -signal.SIGKILL, process.stderr.read().decode()[-2000:]
    assert_bitwise_equal(straight, killed, 30)  # two runs of the same seed
    capsys.readouterr()
    train(fashion_data_dir, killed, *common, "--max-steps", "60")  # 60 x 128 images: 9.6 epochs of 800
    assert "input going on after the 3,840 images trained" in capsys.readouterr().out
    assert_bitwise_equal(straight, killed, 60)
    results = json.loads((killed / "results.json").read_text())
    assert results["deterministic"] is True and results["seed"] == 7 and results["start_global_step"] == 30
    assert not tf_config.is_op_determinism_enabled()  # off again after the in-process run


def test_two_augmented_runs_on_2_replicas_are_bitwise_equal(fashion_data_dir, tmp_path, capsys):
    runs = [tmp_path / "a", tmp_path / "b"]
    for model_dir in runs:
        train(fashion_data_dir, model_dir, "--cpu-replicas", "2", "--augment", "flip,rotate", "--max-steps", "6",
              "--validation-fraction", "0")  # no evaluation during training: a 2-replica run is slow enough
    assert "determinism:   on, seed 0 (no --seed given)" in capsys.readouterr().out
    assert_bitwise_equal(*runs, 6)
    assert json.loads((runs[0] / "results.json").read_text())["seed"] == 0


def test_a_resumed_run_of_the_images_job_s_dropout_model_on_2_replicas_equals_a_straight_run(tmp_path):
    """small_resnet ends in dropout: Keras's draws from a stateful op whose stream starts over in each
    process, and a resume differed from the first resumed step (117 tensors at step 8). Its BatchNorm
    moving statistics are one value a replica, saved as their mean: a resume starts both replicas from
    it, and the mean goes on the same (the update is linear) but for float rounding."""
    from pipeline.tasks.images import TASK as IMAGES
    from tests.images_data import make_shapes_folder
    data = make_shapes_folder(str(tmp_path / "data"), per_class=8)
    common = ["--data-dir", data, "--image-size", "32", "--batch-size", "4", "--bootstrap-resamples", "10",
              "--deterministic", "--seed", "3", "--validation-fraction", "0", "--precision", "fp32",
              "--model", "small_resnet", "--cpu-replicas", "2", "--warm-up-steps", "0"]
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    assert train_main(IMAGES, [*common, "--model-dir", str(straight), "--max-steps", "6"]) == 0
    assert train_main(IMAGES, [*common, "--model-dir", str(resumed), "--max-steps", "3"]) == 0
    assert train_main(IMAGES, [*common, "--model-dir", str(resumed), "--max-steps", "6"]) == 0
    a, b = checkpoint_tensors(straight, 6), checkpoint_tensors(resumed, 6)
    moving = {name for name in a if "/moving_" in name}
    assert len(moving) == 16 and a.keys() == b.keys()
    assert [name for name in a if name not in moving and a[name] != b[name]] == []  # every trained weight
    for name in moving:
        np.testing.assert_allclose(np.frombuffer(b[name], np.float32), np.frombuffer(a[name], np.float32),
                                   rtol=1e-5, err_msg=name)  # 1.2e-6 seen on an AVX2-only CPU


def test_a_deterministic_resume_of_a_model_with_keras_s_own_dropout_is_refused():
    import types
    import pytest
    from models.dropout import StepSeededDropout, stream_dropout_layers
    from pipeline.determinism import check_resumable
    from pipeline.errors import FlagError
    inputs = tf.keras.Input((4,))
    kept = tf.keras.Model(inputs, StepSeededDropout(0.5, name="ours")(tf.keras.layers.Dense(3)(inputs)), name="m")
    streamed = tf.keras.Model(inputs, tf.keras.layers.Dropout(0.2, name="block2a_drop")(kept.output), name="net")
    assert stream_dropout_layers(kept) == [] and stream_dropout_layers(streamed) == ["block2a_drop"]
    deterministic = types.SimpleNamespace(deterministic=True)
    with pytest.raises(FlagError, match=r"--deterministic: net's dropout layers \(block2a_drop\) draw from a random "
                                        "stream that starts over in each process, so a resume from step 20"):
        check_resumable(deterministic, 20, streamed)
    check_resumable(deterministic, 0, streamed)  # a run from scratch repeats: its stream starts where it did
    check_resumable(deterministic, 20, kept)
    check_resumable(types.SimpleNamespace(deterministic=False), 20, streamed)


def test_a_deterministic_model_dir_with_keras_s_own_dropout_is_evaluated_but_not_resumed(tmp_path, capsys):
    """The refusal is for training: an --eval-only draws no dropout and repeats whatever it resumes."""
    from pipeline.tasks.images import TASK as IMAGES
    from tests.images_data import make_shapes_folder
    data = make_shapes_folder(str(tmp_path / "data"), per_class=4)
    common = ["--data-dir", data, "--model-dir", str(tmp_path / "model"), "--image-size", "32", "--batch-size", "4",
              "--bootstrap-resamples", "10", "--deterministic", "--seed", "3", "--validation-fraction", "0",
              "--precision", "fp32", "--model", "efficientnet_b0", "--weights", "none", "--warm-up-steps", "0"]
    assert train_main(IMAGES, [*common, "--max-steps", "1"]) == 0
    capsys.readouterr()
    tf.keras.backend.clear_session()  # each launch names EfficientNet's unnamed layers afresh, as a new process
    assert train_main(IMAGES, [*common, "--max-steps", "1", "--eval-only"]) == 0
    assert "eval_only/report.md" in capsys.readouterr().out  # evaluated, its report beside
    tf.keras.backend.clear_session()
    assert train_main(IMAGES, [*common, "--max-steps", "2"]) == 2
    assert "draw from a random stream that starts over in each process" in capsys.readouterr().err
