"""End to end: the fashion job trained for a few steps on the real sample, in process."""
import os

import pytest
import tensorflow as tf

from pipeline.flags import build_parser
from pipeline.results import read_results
from pipeline.run_loop import run
from pipeline.tasks.fashion import TASK

RESULT_KEYS = {"global_step", "replicas", "per_replica_batch_size", "global_batch_size",
               "train_images_per_sec", "train_seconds", "eval_accuracy", "eval_loss"}


def fashion_args(*argv):
    return build_parser(TASK).parse_args(list(argv))


@pytest.mark.parametrize("replicas", [1, 2])
def test_short_training_writes_checkpoints_and_results(fashion_data_dir, tmp_path, replicas):
    model_dir = str(tmp_path / "model")
    args = fashion_args("--data-dir", fashion_data_dir, "--model-dir", model_dir,
                        "--cpu-replicas", str(replicas), "--batch-size", "16", "--max-steps", "12",
                        "--warm-up-steps", "2", "--log-steps", "5")
    returned = run(TASK, args)
    results = read_results(model_dir)
    assert results == returned
    assert RESULT_KEYS <= set(results)
    assert results["global_step"] == 12 and results["replicas"] == replicas
    assert results["per_replica_batch_size"] == 16 and results["global_batch_size"] == 16 * replicas
    assert results["timed_steps"] == 10 and results["train_images_per_sec"] > 0
    assert results["eval_examples"] == 200 and 0.0 <= results["eval_accuracy"] <= 1.0
    assert results["learning_rate"] == pytest.approx(0.001 * 16 * replicas / 512)
    assert tf.train.latest_checkpoint(model_dir).endswith("model.ckpt-12")


def test_a_second_run_resumes_from_the_checkpoint_and_stops_at_max_steps(fashion_data_dir, tmp_path):
    model_dir = str(tmp_path / "model")
    common = ["--data-dir", fashion_data_dir, "--model-dir", model_dir, "--batch-size", "16",
              "--warm-up-steps", "1"]
    run(TASK, fashion_args(*common, "--max-steps", "5"))
    results = run(TASK, fashion_args(*common, "--max-steps", "9", "--cpu-replicas", "2"))
    assert results["start_global_step"] == 5 and results["global_step"] == 9
    assert results["timed_steps"] == 3  # steps 6-9, less one warm-up step
    written = open(os.path.join(model_dir, "results.json"), "rb").read()
    again = run(TASK, fashion_args(*common, "--max-steps", "9"))  # finished: nothing to do, nothing changes
    assert again == results and again["train_images_per_sec"] > 0
    assert open(os.path.join(model_dir, "results.json"), "rb").read() == written


def test_epochs_set_the_final_step_from_the_global_batch(fashion_data_dir, tmp_path):
    args = fashion_args("--data-dir", fashion_data_dir, "--model-dir", str(tmp_path), "--cpu-replicas", "2",
                        "--batch-size", "100", "--epochs", "1", "--warm-up-steps", "0")
    assert run(TASK, args)["global_step"] == 4  # 800 images / (100 x 2 replicas)


def test_synthetic_data_needs_no_dataset(tmp_path):
    args = fashion_args("--synthetic", "--data-dir", str(tmp_path / "absent"), "--model-dir",
                        str(tmp_path / "model"), "--batch-size", "32", "--max-steps", "3",
                        "--hooks", "examples_per_second,profiler", "--warm-up-steps", "1", "--log-steps", "2")
    results = run(TASK, args)
    assert results["data_source"] == "synthetic" and results["eval_examples"] == 10000
    assert not os.path.exists(tmp_path / "absent")
    assert any(name.startswith("timeline-") for name in os.listdir(tmp_path / "model"))
