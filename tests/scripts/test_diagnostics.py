"""What TensorFlow hides, shown on request: out of memory as one line, --verbose with TensorFlow's
C++ warnings, and PIPELINE_TRACEBACK=1 for the traceback behind a one-line error."""
import os
import subprocess
import sys

from pipeline.cli import TRACEBACK_VARIABLE
from pipeline.out_of_memory import out_of_memory_message
from tests.conftest import ROOT, assert_clean_failure

TRAIN = os.path.join(ROOT, "scripts", "train_fashion.py")


def run(*flags, **env):
    environ = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", TRACEBACK_VARIABLE)}
    return subprocess.run([sys.executable, TRAIN, *flags], env=dict(environ, **env), capture_output=True, text=True,
                          timeout=300)


def test_a_batch_too_big_for_memory_is_one_line_naming_device_batch_image_and_flag(tmp_path):
    result = run("--synthetic", "--batch-size", "50000000", "--model-dir", str(tmp_path / "m"))
    assert result.returncode == 1
    line = assert_clean_failure(result, "out of memory on CPU:0", "50000000 images per replica", "28x28",
                                "lower --batch-size", f"checkpoints already in {tmp_path / 'm'} are kept")
    assert "ResourceExhaustedError" not in result.stderr and line.startswith("train_fashion.py: error: ")
    assert (tmp_path / "m" / "checkpoint").exists()  # the step-0 checkpoint written before stays


def test_out_of_memory_on_a_gpu_names_it_and_the_image_size_flag():
    import argparse

    import tensorflow as tf
    error = tf.errors.ResourceExhaustedError(None, None, "OOM when allocating tensor with shape[256,224,224,64] "
                                             "and type float on /job:worker/replica:0/task:1/device:GPU:3 by "
                                             "allocator GPU_3_bfc")
    args = argparse.Namespace(batch_size=256, image_size=224, model_dir="runs/oct")
    assert out_of_memory_message(error, args) == (
        "out of memory on GPU:3 allocating a tensor of shape [256,224,224,64], with 256 images per replica at "
        "224x224 pixels: lower --batch-size or --image-size (the learning rate follows the global batch); "
        "checkpoints already in runs/oct are kept")
    assert out_of_memory_message(ValueError("no"), args) is None


def test_verbose_shows_tensorflows_cpp_warnings_and_the_variable_shows_the_traceback(tmp_path):
    unwritable = "/proc/1/no-such-model-dir"
    plain = run("--synthetic", "--model-dir", unwritable)
    assert_clean_failure(plain, "cannot write to the model dir")
    assert "tensorflow/" not in plain.stderr  # no C++ log lines (file:line of TensorFlow's sources)

    shown = run("--synthetic", "--verbose", "--model-dir", unwritable, **{TRACEBACK_VARIABLE: "1"})
    assert shown.returncode == 1
    assert "Traceback (most recent call last)" in shown.stderr and "UsageError" in shown.stderr
    assert "cannot write to the model dir" in shown.stderr.strip().splitlines()[-1]  # still the last line
    assert any(level in line for line in shown.stderr.splitlines() for level in (" W ", " E ")
               if "tensorflow/" in line or "external/" in line), shown.stderr[:3000]
