"""The command line as a user meets it: real processes, exit codes and messages."""
import gzip
import json
import os
import shlex
import shutil
import subprocess
import sys

import pytest

from pipeline.flags import build_parser
from pipeline.tasks.fashion import TASK as FASHION
from pipeline.tasks.fashion_dataset import SAMPLE_RECIPE
from tests.conftest import ROOT, assert_clean_failure

SCRIPT = os.path.join(ROOT, "scripts", "train_fashion.py")
OFFLINE = ["--download-url", "http://127.0.0.1:9/"]  # refused at once, like a machine offline


def train_fashion(*argv):
    return subprocess.run([sys.executable, SCRIPT, *argv], capture_output=True, text=True, timeout=600)


def test_the_job_trains_on_two_cpu_replicas_and_learns(fashion_data_dir, tmp_path):
    model_dir = tmp_path / "model"
    result = train_fashion("--data-dir", fashion_data_dir, "--model-dir", str(model_dir), "--cpu-replicas", "2",
                           "--batch-size", "32", "--epochs", "8", "--lr-scaling", "none", "--log-steps", "20")
    assert result.returncode == 0, result.stderr
    assert "32 per replica x 2 replica(s) = 64 global" in result.stdout
    assert "images/sec" in result.stderr  # the throughput hook's progress lines
    results = json.loads((model_dir / "results.json").read_text())
    # 8 epochs of the 718 images left after the validation split (82 held out), 64 a step
    assert results["train_examples"] == 718 and results["validation_examples"] == 82
    assert results["global_step"] == 90 and results["replicas"] == 2
    assert results["eval_accuracy"] > 0.5  # chance is 0.1
    assert f"accuracy {results['eval_accuracy']:.4f}" in result.stdout


def test_missing_data_offline_names_data_dir_and_synthetic(tmp_path):
    result = train_fashion("--data-dir", str(tmp_path / "none"), "--model-dir", str(tmp_path / "m"), *OFFLINE)
    assert_clean_failure(result, "downloading http://127.0.0.1:9/", "--data-dir", "--synthetic")


def test_corrupt_idx_file_is_named_and_earlier_results_stay_intact(fashion_data_dir, tmp_path):
    data_dir = tmp_path / "data"
    shutil.copytree(fashion_data_dir, data_dir)
    with gzip.open(data_dir / "train-images-idx3-ubyte.gz", "wb") as f:
        f.write(b"\x00\x00\x08\x01garbage")
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "results.json").write_text('{"global_step": 3}')
    (model_dir / "checkpoint").write_text("model_checkpoint_path: \"model.ckpt-3\"\n")
    result = train_fashion("--data-dir", str(data_dir), "--model-dir", str(model_dir), *OFFLINE)
    assert_clean_failure(result, "train-images-idx3-ubyte.gz has IDX magic number 2049, expected 2051")
    assert (model_dir / "results.json").read_text() == '{"global_step": 3}'
    assert (model_dir / "checkpoint").read_text() == "model_checkpoint_path: \"model.ckpt-3\"\n"


def test_more_gpus_than_visible(tmp_path):
    result = train_fashion("--synthetic", "--gpus", "4", "--model-dir", str(tmp_path))
    assert_clean_failure(result, "--gpus 4 asks for 4 GPUs but 0 are visible")


def test_unwritable_model_dir(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = train_fashion("--synthetic", "--model-dir", str(blocker / "model"))
    assert_clean_failure(result, "cannot write to the model dir", "--model-dir")


@pytest.mark.parametrize("flag,value", [("--batch-size", "0"), ("--epochs", "-1"), ("--max-steps", "x"),
                                        ("--hooks", "bogus")])
def test_bad_flag_values_are_refused_before_anything_runs(tmp_path, flag, value):
    result = train_fashion("--synthetic", "--model-dir", str(tmp_path / "m"), flag, value)
    assert_clean_failure(result, flag)
    assert result.returncode == 2 and not (tmp_path / "m").exists()


def test_help_explains_the_batch_semantics():
    result = train_fashion("--help")
    assert result.returncode == 0
    assert "images per replica per step" in " ".join(result.stdout.split())


def test_make_fashion_sample_splits_the_real_sample(fashion_sample, tmp_path):
    out = tmp_path / "my sample"
    result = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "make_fashion_sample.py"),
                             "--source", fashion_sample, "--out", str(out), "--train", "900"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "900 training and 100 test images" in result.stdout
    # The command to train on it, with the sample's recipe (applied by itself only to the fallback) and the folder
    # quoted for a shell.
    command = shlex.split(result.stdout.splitlines()[1])
    assert command[:5] == ["scripts/in_venv.sh", "python", "scripts/train_fashion.py", "--data-dir", str(out)]
    parsed = build_parser(FASHION).parse_args(command[3:])
    assert {name: getattr(parsed, name) for name in SAMPLE_RECIPE if SAMPLE_RECIPE[name] is not None} == \
        {name: value for name, value in SAMPLE_RECIPE.items() if value is not None}
    assert len(os.listdir(out)) == 4
    too_many = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "make_fashion_sample.py"), "--source",
                               fashion_sample, "--out", str(tmp_path / "x"), "--train", "1000"],
                              capture_output=True, text=True, timeout=120)
    assert too_many.returncode == 2 and not (tmp_path / "x").exists()  # a flag out of bounds, as argparse's are
    assert_clean_failure(too_many, "error: argument --train: must be from 1 to 999 (the sample's 1000 images")
    # Into a folder that holds such files (its own --source, a dataset's, its own last output): they were overwritten.
    before = {name: (out / name).read_bytes() for name in os.listdir(out)}
    for source in (fashion_sample, str(out)):
        again = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "make_fashion_sample.py"),
                                "--source", source, "--out", str(out), "--train", "100", "--seed", "3"],
                               capture_output=True, text=True, timeout=120)
        assert again.returncode == 2
        assert_clean_failure(again, f"--out {out} already holds ", "which this would overwrite; pass another --out")
    assert {name: (out / name).read_bytes() for name in os.listdir(out)} == before


def test_a_home_where_no_folder_can_be_made_names_the_path_and_the_flag(tmp_path):
    env = {**os.environ, "HOME": "/proc"}  # ~/.keras/datasets cannot be created under /proc
    result = subprocess.run([sys.executable, SCRIPT, "--model-dir", str(tmp_path / "m"), *OFFLINE], env=env,
                            capture_output=True, text=True, timeout=300)
    line = assert_clean_failure(result, "No such file or directory (/proc/.keras)", "create it, or pass another "
                                "--data-dir")
    assert "free some space" not in line and "write failed" not in line


def test_output_piped_into_a_reader_that_stops_ends_in_one_line_that_says_so(tmp_path):
    """`train_fashion.py | head -1`: it said 'a file operation failed: Broken pipe; fix that path, or pass
    another folder; then run the same command: it resumes from ...', naming no path and no checkpoint."""
    with subprocess.Popen([sys.executable, SCRIPT, "--synthetic", "--max-steps", "2", "--batch-size", "8",
                           "--model-dir", str(tmp_path / "m")], stdout=subprocess.PIPE, stderr=subprocess.PIPE) as run:
        assert run.stdout.readline().startswith(b"fashion: ")
        run.stdout.close()  # as head does after its line
        err = run.stderr.read().decode()
        assert run.wait(timeout=300) == 1, err[-2000:]
    last = err.strip().splitlines()[-1]
    assert last == ("train_fashion.py: error: stopped: the program reading this output closed it (a pipe into "
                    "head, say); send the output to a file instead (> out.txt), or read it all"), err[-2000:]
    assert "Traceback" not in err and "Exception ignored" not in err
