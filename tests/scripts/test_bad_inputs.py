"""Every kind of bad input both jobs can meet, through the real command lines.

Each case must end with one clear line naming the problem, a non-zero exit, no
Python traceback, and the model dir's checkpoint and results byte for byte as
they were.
"""
import concurrent.futures
import hashlib
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from pipeline.flags import build_parser
from pipeline.model_dir import LOCK_FILES
from pipeline.roles import run
from pipeline.tasks.fashion import TASK as FASHION
from tests.bad_data import fashion_copy, idx_with_wrong_magic, idx_with_mismatched_counts, idx_truncated, data_dir_is_a_file, oct_copy, oct_unknown_class, oct_empty_class, oct_no_images, oct_and_records_manifest, oct_only_val, oct_with
from tests.conftest import ROOT, assert_clean_failure, odd_jpegs

OFFLINE = {"HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9",
           "https_proxy": "http://127.0.0.1:9", "http_proxy": "http://127.0.0.1:9"}  # refused at once
OCT_SMALL = ["--image-size", "32", "--weights", "none"]


@pytest.fixture(scope="module")
def trained_model_dir(fashion_data_dir, tmp_path_factory):
    """A model dir with a real checkpoint and results.json, from a 3-step run."""
    model_dir = str(tmp_path_factory.mktemp("precious"))
    run(FASHION, build_parser(FASHION).parse_args(
        ["--data-dir", fashion_data_dir, "--model-dir", model_dir, "--max-steps", "3", "--batch-size", "8"]))
    return model_dir


@pytest.fixture(scope="module")
def trained_oct_model_dir(oct_tree, tmp_path_factory):
    """An OCT model dir with a real checkpoint and results.json, from a 1-step run on the sample's tree
    (the data the OCT cases below start from)."""
    from pipeline.tasks.oct import TASK as OCT
    model_dir = str(tmp_path_factory.mktemp("precious-oct"))
    run(OCT, build_parser(OCT).parse_args(["--data-dir", os.path.dirname(oct_tree), "--model-dir", model_dir,
                                           "--max-steps", "1", "--batch-size", "2"] + OCT_SMALL))
    return model_dir


def copy_or_link(source, target):
    """Hard-links a checkpoint's large data files (the OCT model's are 115 MB each, and two dozen cases
    copy it) and copies the rest, the locks among them. A run that writes into a linked file changes
    its bytes, which the snapshot compared after the run shows."""
    if os.path.getsize(source) > 1 << 20:
        os.link(source, target)
    else:
        shutil.copy2(source, target)


def snapshot(directory):
    """Returns {file: sha256} of every file under `directory` but the locks (each names its last
    holder's process and holds no data)."""
    return {os.path.relpath(os.path.join(d, f), directory): hashlib.sha256(open(os.path.join(d, f), "rb").read())
            .hexdigest() for d, _, files in os.walk(directory) for f in files if f not in LOCK_FILES}


CASES = {
    # id: (script, data maker or None, extra argv, extra env, fragments of the last stderr line)
    "fashion-missing-data-offline": ("train_fashion.py", None, ["--data-dir", "{tmp}/absent"], OFFLINE,
                                     ["Fashion-MNIST is not in", "--data-dir", "--synthetic"]),
    "fashion-data-dir-is-a-file": ("train_fashion.py", data_dir_is_a_file, [], {}, ["is a file, not a folder"]),
    "fashion-wrong-idx-magic": ("train_fashion.py", idx_with_wrong_magic, [], {},
                                ["train-images-idx3-ubyte.gz has IDX magic number 2049, expected 2051"]),
    "fashion-mismatched-counts": ("train_fashion.py", idx_with_mismatched_counts, [], {},
                                  ["holds 800 images but", "holds 795 labels"]),
    "fashion-truncated-idx": ("train_fashion.py", idx_truncated, [], {}, ["t10k-images-idx3-ubyte.gz is truncated"]),
    "oct-empty-pattern": ("train_oct.py", oct_no_images, OCT_SMALL, {}, ["no files match the pattern",
                                                                         "train/*/*.jpeg"]),
    "oct-unknown-class-folder": ("train_oct.py", oct_unknown_class, OCT_SMALL, {},
                                 ["unknown class folder(s) GLAUCOMA", "the classes are CNV, DME, DRUSEN, NORMAL"]),
    "oct-empty-class-folder": ("train_oct.py", oct_empty_class, OCT_SMALL, {}, ["no readable images of class DME"]),
    "oct-corrupt-jpeg": ("train_oct.py", oct_with("corrupt.jpeg", lambda good: good[:20] + b"\x00" * 64), OCT_SMALL,
                         {}, ["corrupt.jpeg is truncated (no JPEG end marker)", "--on-bad-image=skip"]),
    "oct-truncated-jpeg": ("train_oct.py", oct_with("cut.jpeg", lambda good: good[: len(good) // 3]), OCT_SMALL, {},
                           ["cut.jpeg is truncated"]),
    "oct-png-named-jpeg": ("train_oct.py", oct_with("scan.jpeg", lambda good: b"\x89PNG\r\n\x1a\n" + good[8:]),
                           OCT_SMALL, {}, ["scan.jpeg is not a JPEG file"]),
    **{f"oct-{kind}-jpeg": ("train_oct.py", oct_with(f"{kind}.jpeg", lambda good, kind=kind: odd_jpegs(good)[kind][0]),
                            OCT_SMALL, {}, [f"{kind}.jpeg {message}", "--on-bad-image=skip"])
       for kind, message in (("cmyk", "is a CMYK JPEG"), ("12-bit", "is a 12-bit JPEG"),
                             ("lossless", "is a lossless or hierarchical JPEG"), ("empty", "is empty"))},
    "oct-cache-dir-is-a-file": ("train_oct.py", oct_copy, OCT_SMALL + ["--cache", "{tmp}/file", "--model-dir",
                                                                       "{tmp}/fresh"], {},
                                ["the cache dir", "is a file; pass --cache with a folder"]),
    "oct-class-ordered-shards": ("train_oct.py", oct_and_records_manifest({"image_size": [32, 32], "counts": {}}),
                                 OCT_SMALL + ["--records-dir", "{tmp}/records"], {},
                                 ["written in class order by an earlier version", "scripts/prepare_oct.py"]),
    "oct-manifest-missing-keys": ("train_oct.py", oct_and_records_manifest({"version": 3, "image_shape": [32, 32, 1],
                                                                             "splits": {}}),
                                  OCT_SMALL + ["--records-dir", "{tmp}/records"], {},
                                  ["manifest.json lacks source, class_names, splits.train, splits.test"]),
    "fashion-cache-dir-is-a-file": ("train_fashion.py", fashion_copy, ["--cache-dir", "{tmp}/file"], {},
                                    ["the cache dir", "is a file; pass --cache-dir with a folder"]),
    "oct-weights-not-h5": ("train_oct.py", oct_copy, ["--image-size", "32", "--weights", "{tmp}/file"], {},
                           ["is not an HDF5 (.h5) weights file"]),
    "oct-tree-with-only-val": ("train_oct.py", oct_only_val, OCT_SMALL, {},
                               ["holds no OCT2017 tree (a folder with train/ and test/ class folders"]),
    "oct-step-larger-than-memory": ("train_oct.py", oct_copy, ["--image-size", "2048", "--batch-size", "4096",
                                                               "--weights", "none"], {},
                                    ["--image-size 2048 with --batch-size 4096 needs about 8192 GiB per step"]),
    "tf-config-task-is-a-string": ("train_fashion.py", None, ["--synthetic", "--strategy", "multi_worker_mirrored"],
                                   {"TF_CONFIG": '{"cluster": {"chief": ["127.0.0.1:1"]}, "task": "chief"}'},
                                   ["TF_CONFIG's 'task' must be an object like"]),
    "oct-no-kaggle-credentials": ("train_oct.py", None, ["--data-dir", "{tmp}/absent"] + OCT_SMALL,
                                  {"HOME": "{tmp}", "KAGGLE_CONFIG_DIR": "{tmp}/.kaggle"},
                                  ["no Kaggle credentials", "kaggle.json", "--data-dir"]),
    "oct-offline-download": ("train_oct.py", None, ["--data-dir", "{tmp}/absent"] + OCT_SMALL,
                             dict(OFFLINE, HOME="{tmp}", KAGGLE_USERNAME="someone", KAGGLE_KEY="0" * 32),
                             ["cannot download paultimothymooney/kermany2018", "--data-dir"]),
    "oct-imagenet-weights-offline": ("train_oct.py", oct_copy, ["--image-size", "32", "--weights", "imagenet"],
                                     dict(OFFLINE, HOME="{tmp}"), ["--weights none", "--weights PATH"]),
    "oct-missing-records-dir": ("train_oct.py", None, ["--records-dir", "{tmp}/absent"] + OCT_SMALL, {},
                                ["manifest.json", "scripts/prepare_oct.py"]),
    "gpus-above-visible": ("train_fashion.py", None, ["--synthetic", "--gpus", "3"], {},
                           ["--gpus 3 asks for 3 GPUs but 0 are visible"]),
    "zero-batch-size": ("train_fashion.py", None, ["--synthetic", "--batch-size", "0"], {},
                        ["--batch-size", "must be greater than 0"]),
    "negative-batch-size": ("train_oct.py", None, ["--synthetic", "--batch-size", "-4"], {},
                            ["--batch-size", "must be greater than 0"]),
    # resumed on its own data (718 training images): the ETA of so many images overflowed (a traceback)
    "uncountable-epochs": ("train_fashion.py", lambda sample, tmp: sample, ["--epochs", "1e300"], {},
                           ["--epochs 1e+300 plans 7.18e+302 training images", "pass a smaller --epochs"]),
    "zero-epochs": ("train_fashion.py", None, ["--synthetic", "--epochs", "0"], {},
                    ["--epochs", "must be a finite number greater than 0"]),
    "negative-max-steps": ("train_oct.py", None, ["--synthetic", "--max-steps", "-1"], {},
                           ["--max-steps", "must be greater than 0"]),
    "unwritable-model-dir": ("train_fashion.py", None, ["--synthetic", "--model-dir", "{tmp}/file/model"], {},
                             ["cannot write to the model dir", "--model-dir"]),
    "malformed-tf-config": ("train_fashion.py", None, ["--synthetic"], {"TF_CONFIG": '{"cluster": {"chief": '},
                            ["TF_CONFIG is not valid JSON"]),
    "tf-config-task-outside-cluster": ("train_fashion.py", None, ["--synthetic", "--strategy",
                                                                  "multi_worker_mirrored"],
                                       {"TF_CONFIG": json.dumps({"cluster": {"chief": ["127.0.0.1:1"]},
                                                                 "task": {"type": "worker", "index": 0}})},
                                       ["TF_CONFIG's task worker 0 is not in its cluster"]),
    "multi-worker-without-cluster": ("train_fashion.py", None, ["--synthetic", "--strategy", "parameter_server"],
                                     {}, ["--strategy parameter_server needs a cluster in TF_CONFIG"]),
    # The model dir is another job's (the other cases get their own job's finished run).
    "oct-on-a-finished-fashion-run": ("train_oct.py", None, ["--synthetic", "--max-steps", "2"] + OCT_SMALL, {},
                                      ["holds a run of the fashion job, not oct", "pass another --model-dir"]),
    "fashion-on-an-oct-run": ("train_fashion.py", None, ["--synthetic", "--max-steps", "5"], {},
                              ["holds a run of the oct job, not fashion", "pass another --model-dir"]),
}
ANOTHER_JOBS_MODEL_DIR = {"oct-on-a-finished-fashion-run", "fashion-on-an-oct-run"}


BAD_INPUT_TEST = "test_bad_input_is_one_clear_line_and_harms_nothing"


def start_case(case, trained_model_dir, trained_oct_model_dir, fashion_data_dir, oct_sample, tmp_path):
    """Prepares `case`'s data and model dir under `tmp_path`; returns (command, env, model dir,
    the model dir's snapshot before)."""
    script, make_data, argv, env_extra, _ = CASES[case]
    (tmp_path / "file").write_text("")  # a file where a folder is needed
    model_dir = tmp_path / "model"
    oct_dir = (script == "train_oct.py") != (case in ANOTHER_JOBS_MODEL_DIR)
    shutil.copytree(trained_oct_model_dir if oct_dir else trained_model_dir, model_dir, copy_function=copy_or_link)
    args = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    made = make_data(oct_sample if script == "train_oct.py" else fashion_data_dir, tmp_path) if make_data else None
    if made is not None:  # the data dir made (None: data beside it, given by its own flag)
        args = ["--data-dir", str(made)] + args
    if "--model-dir" not in args:
        args += ["--model-dir", str(model_dir)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAGGLE") and k != "TF_CONFIG"}
    env.update({k: v.replace("{tmp}", str(tmp_path)) for k, v in env_extra.items()})
    return [sys.executable, os.path.join(ROOT, "scripts", script), *args], env, model_dir, snapshot(model_dir)


@pytest.fixture(scope="module")
def bad_input_runs(request, trained_model_dir, trained_oct_model_dir, fashion_data_dir, oct_sample,
                   tmp_path_factory):
    """The commands of the selected CASES, prepared first and then run two at a time in the background
    (most of each is one process importing TensorFlow: one core's work); returns {case: a future of
    (CompletedProcess, model dir, its snapshot before)}."""
    selected = [item.callspec.params["case"] for item in request.session.items
                if item.name.startswith(BAD_INPUT_TEST + "[") and item.module.__name__ == __name__]
    prepared = {case: start_case(case, trained_model_dir, trained_oct_model_dir, fashion_data_dir, oct_sample,
                                 tmp_path_factory.mktemp(case)) for case in selected}

    def run_case(command, env, model_dir, before):
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300), model_dir, before
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        yield {case: pool.submit(run_case, *prepared[case]) for case in selected}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_is_one_clear_line_and_harms_nothing(case, bad_input_runs):
    script, fragments = CASES[case][0], CASES[case][4]
    result, model_dir, before = bad_input_runs[case].result()

    last = assert_clean_failure(result, *fragments)
    assert last.startswith(f"{script}: error: "), last
    assert snapshot(model_dir) == before


BAD_FLAGS = {
    # id: (script, argv, fragment of the last line); each exits 2 before anything runs
    "negative-seed": ("train_fashion.py", ["--synthetic", "--seed", "-1"], "--seed: must be from 0 to 2147483647"),
    "infinite-epochs": ("train_fashion.py", ["--synthetic", "--epochs", "inf"], "--epochs: must be a finite number, got inf"),
    "negative-warm-up-epochs": ("train_fashion.py", ["--synthetic", "--warm-up-epochs", "-1"],
                                "--warm-up-epochs: must be a finite number >= 0"),
    "unknown-lr-schedule": ("train_fashion.py", ["--synthetic", "--lr-schedule", "linear"], "--lr-schedule"),
    "huge-image-size": ("train_oct.py", ["--synthetic", "--image-size", "100000"],
                        "--image-size: must be from 32 to 2048, got 100000"),
    "zero-shuffle-buffer": ("train_oct.py", ["--synthetic", "--shuffle-buffer", "0", "--cache", "memory"],
                            "--shuffle-buffer: must be greater than 0"),
    "too-many-trainable-layers": ("train_oct.py", ["--synthetic", "--trainable-layers", "19"],
                                  "--trainable-layers: must be from 0 to 18, got 19"),
    "augment-unknown-transform": ("train_fashion.py", ["--synthetic", "--augment", "flip,blur"],
                                  "--augment: unknown transform 'blur'; known: flip, rotate, zoom, translate, contrast"),
    "augment-bad-value": ("train_fashion.py", ["--synthetic", "--augment", "rotate=abc"],
                          "--augment: rotate=abc: expected a number, got 'abc'"),
    "augment-forbidden-by-the-job": ("train_oct.py", ["--synthetic", "--augment", "flip=vertical"],
                                     "--augment: flip=vertical is not allowed for this job: an upside-down B-scan"),
    "benchmark-zero-timed-steps": ("benchmark.py", ["--task", "fashion", "--timed-steps", "0"],
                                   "--timed-steps: must be greater than 0"),
    # a thousand logical devices took 12 GB and a quarter of an hour to set up, deaf to SIGTERM
    "too-many-cpu-replicas": ("train_fashion.py", ["--synthetic", "--cpu-replicas", "1000"],
                              "--cpu-replicas: must be from 1 to 64, got 1000"),
    # Keras's loss scaling refused the strategy at the first graph build: a traceback, after the data was read.
    "fp16-central-storage": ("train_fashion.py", ["--synthetic", "--precision", "fp16", "--strategy", "central_storage",
                                                  "--cpu-replicas", "2"],
                             "--precision fp16 --strategy central_storage: Keras's loss scaling"),
    "gpus-and-cpu-replicas": ("train_fashion.py", ["--synthetic", "--gpus", "0", "--cpu-replicas", "2"],
                              "argument --cpu-replicas: not allowed with argument --gpus"),
    "benchmark-too-many-cpu-replicas": ("benchmark.py", ["--task", "fashion", "--cpu-replicas", "2,65"],
                                        "--cpu-replicas: at most 64 logical CPU devices, got 65"),
}


@pytest.mark.parametrize("case", sorted(BAD_FLAGS))
def test_bad_flag_values_exit_2_with_one_line_before_anything_runs(case, trained_model_dir, tmp_path):
    script, argv, fragment = BAD_FLAGS[case]
    model_dir = tmp_path / "model"
    shutil.copytree(trained_model_dir, model_dir)
    before = snapshot(model_dir)
    result = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", script), *argv, "--model-dir",
                             str(model_dir)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert_clean_failure(result, fragment)
    assert snapshot(model_dir) == before and sorted(os.listdir(model_dir)) == sorted(os.listdir(trained_model_dir))


def test_ds_store_files_are_not_images(oct_sample, tmp_path):
    from acquisition import image_checks
    data = oct_copy(oct_sample, tmp_path)
    (data / "OCT2017" / "train" / "CNV" / ".DS_Store").write_bytes(b"\x00\x00\x00\x01Bud1" + bytes(100))
    scan = image_checks.scan_folder(os.path.join(data, "OCT2017", "train", "*", "*.jpeg"), ("CNV", "DME", "DRUSEN",
                                                                                            "NORMAL"))
    assert scan.bad_files == [] and not any(f.endswith(".DS_Store") for f in scan.files)
    assert np.sum(list(scan.class_counts().values())) == 105


def test_a_run_that_fails_on_its_data_leaves_no_folder_it_made(tmp_path):
    """A new model dir (and the parents made for it) goes when the run stops on its data with nothing in it;
    a folder that was there stays as it was (without the run's lock file)."""
    data = tmp_path / "pictures"
    for name in ("a", "b"):
        (data / name).mkdir(parents=True)
        for i in range(3):
            Image.fromarray(np.full((8, 8), 40 * i, np.uint8)).save(data / name / f"{i}.png")
    (data / "a" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    (tmp_path / "there").mkdir()
    (tmp_path / "kept").mkdir()
    (tmp_path / "kept" / "notes.txt").write_text("mine\n")
    for model_dir in ("runs/new/model", "there", "there/model", "kept"):
        result = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "train_images.py"), "--data-dir",
                                 str(data), "--model-dir", str(tmp_path / model_dir), "--max-steps", "1"],
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 1
        assert_clean_failure(result, "broken.png has no PNG header")
    assert sorted(os.listdir(tmp_path)) == ["kept", "pictures", "there"]
    assert os.listdir(tmp_path / "there") == []  # made by the user: as it was, the run's lock file gone too
    assert os.listdir(tmp_path / "kept") == ["notes.txt"]
