"""Kaggle credentials are read, never written; an isolated cluster downloads nothing. The OCT job's
download path runs where nothing can be reached (a network namespace made here, or the launcher's),
so that the download fails at once."""
import os
import subprocess
import sys

from tests.conftest import ROOT, assert_clean_failure

MARKER = "kaggle-key-marker-7c1e9f"


def run_oct(tmp_path, *prefix, flags=()):
    """Runs the OCT job on an empty --data-dir with the marker as KAGGLE_KEY and a HOME of its own;
    returns the finished process."""
    env = dict(os.environ, HOME=str(tmp_path / "home"), KAGGLE_USERNAME="someone", KAGGLE_KEY=MARKER)
    env.pop("KAGGLE_CONFIG_DIR", None)
    return subprocess.run([*prefix, sys.executable, os.path.join(ROOT, "scripts", "train_oct.py"),
                           "--data-dir", str(tmp_path / "data"), "--model-dir", str(tmp_path / "m"), "--max-steps",
                           "2", *flags], capture_output=True, text=True, timeout=120, env=env)


def assert_marker_written_nowhere(tmp_path, result):
    assert MARKER not in result.stdout + result.stderr
    files = [os.path.join(d, name) for d, _, names in os.walk(tmp_path) for name in names]
    assert not os.path.exists(tmp_path / "m")  # the model dir it made held nothing but its lock, and went
    for path in files:  # the data dir and HOME
        with open(path, "rb") as f:
            assert MARKER.encode() not in f.read(), path


def test_the_kaggle_key_appears_in_no_output_and_no_file(tmp_path):
    result = run_oct(tmp_path, "unshare", "--net")  # a namespace with no network: the download fails at once
    assert_clean_failure(result, "cannot download", "--data-dir")
    assert_marker_written_nowhere(tmp_path, result)


def test_an_isolated_cluster_downloads_nothing_and_says_how_to_give_it_the_data(tmp_path):
    result = run_oct(tmp_path, sys.executable, os.path.join(ROOT, "scripts", "launch_local_cluster.py"),
                     "--workers", "0", "--", flags=["--strategy", "multi_worker_mirrored"])
    assert result.returncode == 1, result.stdout[-3000:]
    line = next(line for line in result.stdout.splitlines() if line.startswith("[chief] train_oct.py: error:"))
    assert "--data-dir" in line and "launch it with --allow-network" in line, line
    assert "Traceback" not in result.stdout
    assert not (tmp_path / "data").exists()  # nothing downloaded, and the folder the failed download made is gone
    assert_marker_written_nowhere(tmp_path, result)
