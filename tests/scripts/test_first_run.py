"""The README's first command as a new user runs it: no flags, empty cwd and HOME, no network."""
import json
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _network_namespace():
    """Returns the command prefix that runs a command in a new network namespace, or skips."""
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("no network namespace: the unshare command is not installed")
    probe = subprocess.run([unshare, "-n", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"no network namespace can be made here (unshare -n: {probe.stderr.strip()})")
    return [unshare, "-n"]


def test_train_fashion_with_no_flags_learns_and_is_timed_offline(tmp_path):
    prefix = _network_namespace()
    cwd, home = tmp_path / "cwd", tmp_path / "home"
    cwd.mkdir(), home.mkdir()
    env = dict(os.environ, HOME=str(home))  # PIPELINE_PEAK_CACHE stays the suite's: probed once
    result = subprocess.run(prefix + [sys.executable, os.path.join(ROOT, "scripts", "train_fashion.py")],
                            cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "NOT THE FULL DATASET" in result.stderr  # the download was tried, and failed: no network
    assert "recipe:        the shipped sample's: batch 32" in result.stdout
    results = json.loads((cwd / "runs" / "fashion" / "results.json").read_text())
    assert results["data_source"].startswith("real (shipped") and results["recipe"] == "shipped sample"
    assert results["eval_accuracy"] >= 0.70, result.stdout[-2000:]
    assert results["train_images_per_sec"] > 0 and results["mfu"] > 0
    # the best model is exported, for predict.py (tests/scripts/test_fashion_export.py)
    assert results["export_dir"] == results["best"]["export_dir"]
    assert os.path.isfile(os.path.join(results["export_dir"], "saved_model.pb"))
    assert f"MFU {results['mfu']:.2f} of" in result.stdout
    assert (home / ".keras" / "datasets" / "fashion-mnist-sample").is_dir() and not list(cwd.glob("*.gz"))
