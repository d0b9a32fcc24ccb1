"""A gs:// model dir that cannot be reached, as a user meets it offline: train_fashion.py run in a
network namespace this test makes (only `lo`, so no DNS: TensorFlow fails at once). One line naming
the bucket and the cause, exit 1, and no local folder made from the URL."""
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT, assert_clean_failure

OFFLINE_RUN = """
import runpy, sys
from cluster.isolation import isolate_network
why = isolate_network()
if why:
    print("NO NAMESPACE:", why)
    sys.exit(99)
sys.argv = [sys.argv[1]] + sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_an_unreachable_gs_model_dir_is_one_line_and_no_local_folder(tmp_path):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    env = {**os.environ, "PYTHONPATH": ROOT, "HOME": str(tmp_path / "home")}  # Keras makes ~/.keras there
    env.pop("GOOGLE_APPLICATION_CREDENTIALS", None)
    result = subprocess.run([sys.executable, "-c", OFFLINE_RUN, os.path.join(ROOT, "scripts", "train_fashion.py"),
                             "--model-dir", "gs://my-bucket/run1", "--synthetic", "--max-steps", "1"],
                            cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    if result.returncode == 99:
        pytest.skip(result.stdout.strip())
    assert result.returncode == 1
    assert_clean_failure(result, "train_fashion.py: error: cannot write to the model dir gs://my-bucket/run1: "
                                 "gs://my-bucket cannot be reached or written (Could not resolve host: "
                                 "www.googleapis.com: no network, or no DNS)")
    assert os.listdir(cwd) == []  # no ./gs:/my-bucket/run1, nothing else


def test_an_unreachable_gs_oct_data_dir_says_it_cannot_be_reached(tmp_path):
    # It said 'gs://my-bucket/oct holds no OCT2017 tree': the folder was never read.
    env = {**os.environ, "PYTHONPATH": ROOT, "HOME": str(tmp_path / "home")}
    env.pop("GOOGLE_APPLICATION_CREDENTIALS", None)
    result = subprocess.run([sys.executable, "-c", OFFLINE_RUN, os.path.join(ROOT, "scripts", "train_oct.py"),
                             "--data-dir", "gs://my-bucket/oct", "--model-dir", str(tmp_path / "m"), "--weights",
                             "none"], env=env, capture_output=True, text=True, timeout=120)
    if result.returncode == 99:
        pytest.skip(result.stdout.strip())
    assert result.returncode == 1
    line = assert_clean_failure(result, "gs://my-bucket cannot be reached or written (Could not resolve host: ")
    assert "holds no OCT2017 tree" not in line and not (tmp_path / "m").exists()
