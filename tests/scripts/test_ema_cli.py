"""--ema through train_fashion.py: a --deterministic run on 2 replicas killed while writing a checkpoint
and relaunched ends with the checkpoints (shadows too), best model and results.json's `ema` of the run
never killed; the flag's bad values and the runs it cannot serve are refused in one line (exit 2)."""
import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from acquisition.faults import KILL_VARIABLE
from pipeline import ema as ema_lib
from pipeline.model_dir import read_checkpoint
from tests.conftest import ROOT, assert_clean_failure

SCRIPT = os.path.join(ROOT, "scripts", "train_fashion.py")


def command(data_dir, model_dir, *extra):
    """Returns the argv of a short deterministic Fashion run with --ema on 2 replicas, validated every 10
    steps, into `model_dir`."""
    return [sys.executable, SCRIPT, "--data-dir", data_dir, "--model-dir", str(model_dir), "--deterministic",
            "--seed", "3", "--batch-size", "16", "--cpu-replicas", "2", "--learning-rate", "3e-3",
            "--lr-scaling", "none", "--max-steps", "30", "--eval-every-steps", "10", "--checkpoint-steps", "10",
            "--ema", "0.9", "--bootstrap-resamples", "20", "--warm-up-steps", "2", *extra]


def run(argv, **env):
    """Returns the finished process of `argv` (its output captured), with `env` added to the environment."""
    return subprocess.run(argv, capture_output=True, text=True, timeout=600, env={**os.environ, **env})


def checkpoint(prefix):
    """Returns {key: value} of the checkpoint `prefix`."""
    reader = read_checkpoint(str(prefix))
    return {key: reader.get_tensor(key) for key in reader.get_variable_to_shape_map()}


def assert_same_checkpoints(first, second):
    """Asserts that two checkpoint prefixes hold the same keys and bit-equal values, shadows among them."""
    a, b = checkpoint(first), checkpoint(second)
    assert sorted(a) == sorted(b)
    assert any(key.startswith(ema_lib.SHADOW_PREFIX) for key in a)
    for key in a:
        assert np.array_equal(a[key], b[key]), key


def test_a_killed_and_relaunched_run_ends_as_the_straight_one(fashion_data_dir, tmp_path):
    straight = run(command(fashion_data_dir, tmp_path / "straight"))
    assert straight.returncode == 0, straight.stderr[-3000:]
    assert "  ema:           weights averaged with decay 0.9" in straight.stdout
    killed = run(command(fashion_data_dir, tmp_path / "killed"), **{KILL_VARIABLE: "checkpoint:3:5"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    relaunched = run(command(fashion_data_dir, tmp_path / "killed"))
    assert relaunched.returncode == 0, relaunched.stderr[-3000:]
    assert "resuming from step" in relaunched.stdout
    assert_same_checkpoints(tmp_path / "straight" / "model.ckpt-30", tmp_path / "killed" / "model.ckpt-30")
    results = [json.load(open(tmp_path / name / "results.json")) for name in ("straight", "killed")]
    best = results[0]["best"]["step"]
    assert_same_checkpoints(tmp_path / "straight" / "best" / f"model.ckpt-{best}",
                            tmp_path / "killed" / "best" / f"model.ckpt-{best}")
    ema = results[0]["ema"]
    assert results[1]["ema"] == ema
    assert ema["decay"] == 0.9 and ema["step"] == 30 == results[0]["global_step"]
    assert set(ema["averaged"]) == set(ema["raw"]) == {"accuracy", "loss"}
    assert ema["averaged"] != ema["raw"]
    if results[0]["eval_step"] == 30:  # the test figures are the final step's averaged weights
        assert ema["averaged"] == {"accuracy": results[0]["eval_accuracy"], "loss": results[0]["eval_loss"]}
    assert f"  ema:     decay 0.9, final step 30: averaged weights accuracy {ema['averaged']['accuracy']:.4f}" \
        in relaunched.stdout


@pytest.mark.parametrize("value", ["0", "1", "1.5", "-0.1", "nan", "x"])
def test_a_decay_outside_zero_to_one_is_refused(value):
    result = run([sys.executable, SCRIPT, "--ema", value])
    assert result.returncode == 2
    assert_clean_failure(result, "--ema")


def test_parameter_server_training_is_refused(tmp_path):
    result = run([sys.executable, SCRIPT, "--synthetic", "--model-dir", str(tmp_path), "--ema", "0.99",
                  "--strategy", "parameter_server"])
    assert result.returncode == 2
    assert_clean_failure(result, "--ema does not work with --strategy parameter_server")


def test_a_model_dir_trained_without_ema_is_not_resumed_with_it(tmp_path):
    argv = [sys.executable, SCRIPT, "--synthetic", "--model-dir", str(tmp_path), "--max-steps", "2",
            "--batch-size", "8", "--validation-fraction", "0", "--bootstrap-resamples", "10"]
    assert run(argv).returncode == 0
    result = run(argv[:-6] + ["--max-steps", "4", "--ema", "0.99"] + argv[-4:])
    assert result.returncode == 2
    assert_clean_failure(result, "was trained without --ema")


def test_a_model_dir_trained_with_ema_is_not_resumed_or_evaluated_without_it(tmp_path, capsys):
    # Its best model was chosen and exported on the average: without --ema, a run went on training and tested the
    # raw weights of that best checkpoint, beside the average's export, without a word.
    from pipeline.cli import train_main
    from pipeline.tasks.fashion import TASK
    flags = ["--synthetic", "--model-dir", str(tmp_path), "--batch-size", "8", "--validation-fraction", "0",
             "--bootstrap-resamples", "10"]
    assert train_main(TASK, [*flags, "--max-steps", "2", "--ema", "0.9"]) == 0
    before = sorted(os.listdir(tmp_path))
    for more in (["--max-steps", "4"], ["--max-steps", "2", "--eval-only"]):
        capsys.readouterr()
        assert train_main(TASK, [*flags, *more]) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and "was trained with --ema" in lines[0] and "resume (or evaluate) it with --ema " \
            "0.9, or pass another --model-dir" in lines[0], lines
    # Nor with another decay: results.json then gave the new one to an average made with 0.9.
    assert train_main(TASK, [*flags, "--max-steps", "4", "--ema", "0.5"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].endswith(
        f"error: --ema 0.5: the checkpoints in {tmp_path} averaged their weights with --ema 0.9; resume (or "
        "evaluate) with --ema 0.9, or pass another --model-dir"), lines
    assert sorted(os.listdir(tmp_path)) == before


def test_a_multi_worker_cluster_keeps_the_average_of_every_step(fashion_data_dir, tmp_path):
    decay = 0.8
    train = [sys.executable, SCRIPT, "--strategy", "multi_worker_mirrored", "--data-dir", fashion_data_dir,
             "--model-dir", str(tmp_path), "--batch-size", "16", "--max-steps", "6", "--checkpoint-steps", "1",
             "--keep-checkpoints", "20", "--validation-fraction", "0", "--seed", "1", "--ema", str(decay),
             "--bootstrap-resamples", "20"]
    result = run([sys.executable, os.path.join(ROOT, "scripts", "launch_local_cluster.py"), "--workers", "1", "--",
                  *train])
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    first = checkpoint(tmp_path / "model.ckpt-0")
    keys = [key[len(ema_lib.SHADOW_PREFIX):] for key in first if key.startswith(ema_lib.SHADOW_PREFIX)]
    assert keys
    expected = {key: first[key].astype(np.float64) for key in keys}
    for step in range(1, 7):
        values = checkpoint(tmp_path / f"model.ckpt-{step}")
        for key in keys:
            expected[key] = decay * expected[key] + (1 - decay) * values[key]
            np.testing.assert_allclose(values[ema_lib.shadow_key(key)], expected[key], rtol=1e-5, atol=1e-6)
    ema = json.load(open(tmp_path / "results.json"))["ema"]
    assert ema["step"] == 6 and ema["averaged"] != ema["raw"]
