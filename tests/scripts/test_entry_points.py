"""Every script answers --help and a bad flag before TensorFlow is imported, and the Fashion
job's first run works without network on the sample shipped with the project."""
import json
import os
import re
import shutil
import socket
import subprocess
import sys

import pytest

from tests.conftest import ROOT, assert_clean_failure

# Runs a script as `python scripts/NAME ...` would, then reports whether TensorFlow was imported.
PROBE = """
import runpy, sys
sys.argv = sys.argv[1:]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
except SystemExit as e:
    code = e.code
else:
    code = 0
sys.stderr.write(f"\\nexit={code} tensorflow_imported={'tensorflow' in sys.modules}\\n")
"""

BAD_FLAGS = {
    "train_fashion.py": ["--batch-size", "0"],
    "train_oct.py": ["--image-size", "16"],
    "train_images.py": ["--channels", "2"],
    "prepare_oct.py": ["--out", "x", "--image-size", "huge"],
    "predict.py": ["--model"],
    "launch_local_cluster.py": ["--workers", "-1", "--", "true"],
    "benchmark.py": ["--task", "oct", "--repeats", "0"],
    "inspect_input.py": ["--task", "fashion", "--batches", "0"],
    "make_fashion_sample.py": ["--out", "x", "--train", "none"],
    "make_oct_sample.py": ["--out", "x", "--test-per-class", "0"],
    "probe_peak.py": ["--precision", "fp64"],
    "compare_runs.py": ["--csv"],  # no DIR
    "measure_generalisation.py": ["--task", "fashion", "--output", "x", "--seeds", "1"],
    "profile_kernels.py": ["--task", "fashion", "--gpus", "1"],
}


def probe(script, *argv):
    return subprocess.run([sys.executable, "-c", PROBE, os.path.join(ROOT, "scripts", script), *argv],
                          capture_output=True, text=True, timeout=120)


def test_every_script_is_probed():
    assert set(BAD_FLAGS) == {name for name in os.listdir(os.path.join(ROOT, "scripts")) if name.endswith(".py")}


@pytest.mark.parametrize("script", sorted(BAD_FLAGS))
def test_help_and_a_bad_flag_answer_without_importing_tensorflow(script):
    shown = probe(script, "--help")
    assert shown.stderr.endswith("exit=0 tensorflow_imported=False\n"), shown.stderr[-2000:]
    assert "usage:" in shown.stdout
    refused = probe(script, *BAD_FLAGS[script])
    assert refused.stderr.endswith("exit=2 tensorflow_imported=False\n"), refused.stderr[-2000:]
    (line,) = [l for l in refused.stderr.splitlines()[:-1] if l]  # one line (argparse printed its usage first)
    assert line.startswith(f"{script}: error: ") and line.endswith("--help lists the flags"), line


@pytest.mark.parametrize("script, argv, typo, meant", [
    ("train_images.py", ["--data-dir", "x"], "--max-stpes", "--max-steps"),
    ("benchmark.py", ["--task", "fashion"], "--repeets", "--repeats"),  # the tool's flag, not the job's
    ("benchmark.py", ["--task", "fashion"], "--batchsize", "--batch-size"),  # the job's
    ("predict.py", ["--model", "x", "image.png"], "--jsno", "--json"),
    ("train_images.py", ["--data-dir", "x"], "--foo", None),  # nothing near: no guess (the dashes alone matched)
    ("compare_runs.py", ["x"], "--model", None),  # nor --help
])
def test_a_misspelt_flag_is_one_line_naming_the_nearest(script, argv, typo, meant):
    refused = probe(script, *argv, f"{typo}=2")
    assert refused.stderr.endswith("exit=2 tensorflow_imported=False\n"), refused.stderr[-2000:]
    (line,) = [l for l in refused.stderr.splitlines()[:-1] if l]
    guess = f" (did you mean {meant}?)" if meant else ""
    assert line == f"{script}: error: unrecognized arguments: {typo}=2{guess}; --help lists the flags"


@pytest.mark.parametrize("script, argv, words", [
    ("train_images.py", ["--data-dir", "{tmp}/absent"], "--data-dir {tmp}/absent: no such folder"),
    ("train_images.py", ["--data-dir", "{tmp}", "--model-dir", "{tmp}/model"], "is inside --data-dir"),
    ("train_fashion.py", ["--min-delta", "0.01"], "--min-delta is the least improvement --patience counts"),
    ("train_images.py", ["--data-dir", "{tmp}", "--model", "small_resnet", "--weights", "imagenet"],
     "--model small_resnet is trained from scratch and has no ImageNet weights; pass --weights none"),
    ("train_fashion.py", ["--init-from", "{tmp}/absent"], "--init-from {tmp}/absent: no such folder"),
    ("train_oct.py", ["--init-from", "{tmp}/model/"], "is this run's own --model-dir"),
    ("train_images.py", [], "pass --data-dir with a folder of class folders"),
])
def test_flags_refused_whatever_the_data_answer_without_importing_tensorflow(script, argv, words, tmp_path):
    argv = [a.format(tmp=tmp_path) for a in argv]
    model_dir = [] if "--model-dir" in argv else ["--model-dir", str(tmp_path / "model")]
    refused = probe(script, *argv, *model_dir)
    assert refused.stderr.endswith("exit=2 tensorflow_imported=False\n"), refused.stderr[-2000:]
    (line,) = [l for l in refused.stderr.splitlines()[:-1] if l]
    assert line.startswith(f"{script}: error: ") and words.format(tmp=tmp_path) in line, line
    assert not (tmp_path / "model").exists()


@pytest.mark.parametrize("folders, data_dir, words", [
    (["cats"], "", "holds 1 class folder(s); a classifier needs at least 2"),
    ([], "cats", "holds 2 image(s) and no class folders: it looks like one class's folder; pass --data-dir {tmp}"),
    (["train/cats", "train/dogs", "test/cats"], "", "has no folder for class(es) 'dogs', which train has"),
    (["train/cats", "val/cats"], "", "holds the split folders train, val"),
])
def test_a_data_dir_whose_folders_cannot_be_a_dataset_answers_without_importing_tensorflow(folders, data_dir, words,
                                                                                            tmp_path):
    data = tmp_path / "data"
    for folder in folders + ["cats"] * (not folders):
        (data / folder).mkdir(parents=True)
    if not folders:
        for name in ("a.png", "b.png"):
            (data / "cats" / name).write_bytes(b"")
    refused = probe("train_images.py", "--data-dir", str(data / data_dir), "--model-dir", str(tmp_path / "model"))
    assert refused.stderr.endswith("exit=1 tensorflow_imported=False\n"), refused.stderr[-2000:]
    (line,) = [l for l in refused.stderr.splitlines()[:-1] if l]
    assert line.startswith("train_images.py: error: ") and words.format(tmp=data) in line, line
    assert not (tmp_path / "model").exists()


def test_a_misspelt_required_flag_is_named_beside_the_missing_one():
    refused = probe("predict.py", "--modle=runs/x", "image.png")
    assert refused.stderr.endswith("exit=2 tensorflow_imported=False\n"), refused.stderr[-2000:]
    (line,) = [l for l in refused.stderr.splitlines()[:-1] if l]
    assert line == ("predict.py: error: the following arguments are required: --model (--modle given: did you mean "
                    "--model?); --help lists the flags")


def test_the_launcher_given_a_command_without_double_dash_says_where_it_goes():
    refused = probe("launch_local_cluster.py", "--workers", "1", "python", "train.py", "--max-steps", "5")
    (line,) = [l for l in refused.stderr.splitlines()[:-1] if l]
    assert line == ("launch_local_cluster.py: error: give the training command after --, as in ... -- python "
                    "train.py --max-steps 5; --help lists the flags")


def refused_url():
    """Returns an http URL on this machine where nothing listens: connections are refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/"


def train_fashion(home, *argv):
    env = dict(os.environ, HOME=str(home))  # the default data dir is under ~/.keras
    return subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "train_fashion.py"),
                           "--download-url", refused_url(), *argv],
                          capture_output=True, text=True, timeout=600, env=env)


@pytest.mark.parametrize("script, argv", [
    ("train_fashion.py", ["--synthetic", "--max-steps", "1", "--model-dir", "{tmp}/model"]),
    ("predict.py", ["--model", "{tmp}/none", "--json", "{tmp}"]),
])
def test_a_python_without_the_packages_is_told_to_use_the_venv_in_one_line(script, argv, tmp_path):
    """`scripts/x.py` run as written starts the system's Python, which lacks the packages (the docs'
    commands leave out scripts/in_venv.sh): here a bare virtualenv of this Python."""
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True, timeout=120)
    python = str(bare / "bin" / "python")
    result = subprocess.run([python, os.path.join(ROOT, "scripts", script),
                             *[a.replace("{tmp}", str(tmp_path)) for a in argv]], cwd=tmp_path, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 1 and len(result.stderr.strip().splitlines()) == 1, result.stderr[-3000:]
    line = assert_clean_failure(result, f"{script}: error: this Python ({python}) has no ", "scripts/in_venv.sh")
    assert re.search(r"has no (tensorflow|numpy) module;", line), line
    assert not (tmp_path / "model").exists()


def test_in_venv_refuses_a_python_that_is_not_there_in_one_line(tmp_path):
    """It went on with python3 without a word, where PYTHON named a path with a typo."""
    result = subprocess.run([os.path.join(ROOT, "scripts", "in_venv.sh"), "true"], capture_output=True, text=True,
                            timeout=60, env=dict(os.environ, PYTHON=str(tmp_path / "python3.11"),
                                                 VENV=str(tmp_path / "venv")))
    assert result.returncode == 1 and not (tmp_path / "venv").exists(), result.stderr
    assert_clean_failure(result, f"in_venv.sh: error: PYTHON={tmp_path / 'python3.11'} is not an interpreter found "
                                 "here; set PYTHON to the path of a Python 3.9-3.11")


def test_in_venv_runs_a_ready_venv_whatever_python_the_path_holds_now(tmp_path):
    """A venv made with PYTHON=/opt/python3.11 was refused on the next call, whose python3 was a 3.12: the
    interpreter matters only to make the venv."""
    import hashlib
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    with open(os.path.join(ROOT, "requirements.txt"), "rb") as f:
        (venv / ".requirements.sha256").write_text(hashlib.sha256(f.read()).hexdigest() + "\n")
    path = tmp_path / "path"
    path.mkdir()
    (path / "python3").write_text("#!/bin/sh\necho 'Python 3.12.3'; exit 1\n")  # a 3.12, and no python3.11
    (path / "python3").chmod(0o755)
    for tool in ("bash", "sh", "env", "dirname", "sha256sum", "cut", "cat"):  # the script's, and no other Python
        (path / tool).symlink_to(shutil.which(tool))
    result = subprocess.run([os.path.join(ROOT, "scripts", "in_venv.sh"), "sh", "-c", "command -v python"],
                            capture_output=True, text=True, timeout=60,
                            env={"PATH": str(path), "VENV": str(venv), "HOME": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(venv / "bin" / "python") and not result.stderr
    assert sorted(os.listdir(venv)) == [".requirements.sha256", "bin"]  # nothing installed again


@pytest.mark.parametrize("name", ["pipline", "tensorflow.python.not_in_this_version", "scipy"])
def test_a_missing_module_that_is_no_absent_requirement_stays_a_bug(name):
    """A misspelt module of the project's, one inside an installed package, or a package the project does
    not require: shown as the bug it is (a traceback), not sent to the venv."""
    from pipeline.cli import _missing_package
    assert _missing_package(ModuleNotFoundError(f"No module named {name!r}", name=name)) is None


def test_without_network_the_first_run_trains_on_the_shipped_sample_and_says_so(tmp_path):
    model_dir = tmp_path / "model"
    result = train_fashion(tmp_path, "--model-dir", str(model_dir), "--batch-size", "32", "--max-steps", "5")
    assert result.returncode == 0, result.stderr[-3000:]
    loud = [line for line in result.stderr.splitlines() if "NOT THE FULL DATASET" in line]
    assert len(loud) == 1 and "Connection refused" in loud[0] and "--no-sample-fallback" in loud[0]
    assert "real (shipped 1,000-image sample) data, 718 training / 82 validation / 200 test images" in result.stdout
    results = json.loads((model_dir / "results.json").read_text())
    assert results["data_source"] == "real (shipped 1,000-image sample)"
    assert results["train_examples"] == 718 and results["eval_examples"] == 200


def test_no_sample_fallback_makes_the_failed_download_one_line(tmp_path):
    result = train_fashion(tmp_path, "--model-dir", str(tmp_path / "model"), "--no-sample-fallback")
    assert_clean_failure(result, "downloading http://127.0.0.1:", "Connection refused", "--data-dir",
                         "--synthetic")
    assert not (tmp_path / "model" / "results.json").exists()


def test_another_data_dir_or_a_cluster_never_falls_back(tmp_path, monkeypatch):
    from acquisition.errors import DownloadError
    from pipeline.flags import build_parser
    from pipeline.tasks import fashion, fashion_job

    monkeypatch.setattr(fashion_job, "DEFAULT_DATA_DIR", str(tmp_path / "default"))
    args = build_parser(fashion.TASK).parse_args(["--data-dir", str(tmp_path / "other"), "--download-url",
                                                  refused_url()])
    with pytest.raises(DownloadError, match="Connection refused"):
        fashion_job.prepare_data(args, 32)
    args.data_dir = str(tmp_path / "default")
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {"chief": ["127.0.0.1:1"]},
                                                "task": {"type": "chief", "index": 0}}))
    with pytest.raises(DownloadError, match="Connection refused"):
        fashion_job.prepare_data(args, 32)
    monkeypatch.delenv("TF_CONFIG")
    assert fashion_job.prepare_data(args, 32).source == "real (shipped 1,000-image sample)"


@pytest.mark.parametrize("spelling", ["trailing-slash", "relative"])
def test_the_default_data_dir_spelled_otherwise_still_falls_back(tmp_path, monkeypatch, spelling):
    from pipeline.flags import build_parser
    from pipeline.tasks import fashion, fashion_job

    monkeypatch.setattr(fashion_job, "DEFAULT_DATA_DIR", str(tmp_path / "datasets" / "fashion-mnist"))
    monkeypatch.chdir(tmp_path)
    data_dir = {"trailing-slash": str(tmp_path / "datasets" / "fashion-mnist") + "/",
                "relative": os.path.join(".", "datasets", "..", "datasets", "fashion-mnist")}[spelling]
    args = build_parser(fashion.TASK).parse_args(["--data-dir", data_dir, "--download-url", refused_url()])
    data = fashion_job.prepare_data(args, 32)
    assert data.source == "real (shipped 1,000-image sample)" and data.num_train_examples == 718
    assert (tmp_path / "datasets" / "fashion-mnist-sample").is_dir()
