"""inspect_input.py as a user runs it before training: every input mode of both jobs, on
data of the real size and class order, shows batches mixed like the dataset."""
import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from tests.conftest import ROOT, OCT2017_TRAIN_COUNTS, assert_clean_failure

SCRIPT = os.path.join(ROOT, "scripts", "inspect_input.py")
BATCHES = 100


def inspect(*argv, cwd=None, env=None):
    result = subprocess.run([sys.executable, SCRIPT, *argv], capture_output=True, text=True, timeout=600, cwd=cwd,
                            env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def inspect_json(*argv):
    return json.loads(inspect(*argv, "--json").stdout)


def assert_mixed_like_the_dataset(report, tolerance=0.04):
    counts = np.array(report["class_counts_per_batch"])
    assert counts.shape == (BATCHES, len(report["class_names"]))
    share = counts.sum(0) / counts.sum()
    assert np.abs(share - report["dataset_class_share"]).max() < tolerance, (share, report["dataset_class_share"])
    assert report["single_class_batches"] == 0 and (counts.max(1) < counts.sum(1)).all()
    assert report["images_per_sec"] > 0


@pytest.mark.parametrize("mode", ["jpeg", "memory-cache", "file-cache", "prepared-shards"])
def test_every_oct_mode_on_the_full_size_tree_feeds_mixed_batches(full_oct_tree, full_oct_records, tmp_path, mode):
    flags = {"jpeg": [], "memory-cache": ["--cache", "memory"], "file-cache": ["--cache", str(tmp_path / "cache")],
             "prepared-shards": ["--records-dir", full_oct_records]}[mode]
    data = [] if mode == "prepared-shards" else ["--data-dir", os.path.dirname(full_oct_tree)]  # one or the other
    report = inspect_json("--task", "oct", *data, "--image-size", "32",
                          "--batches", str(BATCHES), "--validation-fraction", "0", *flags)  # all, as the shards
    assert report["class_names"] == list(OCT2017_TRAIN_COUNTS)
    assert report["train_examples"] == sum(OCT2017_TRAIN_COUNTS.values())
    assert_mixed_like_the_dataset(report)


def test_fashion_records_of_the_real_size_feed_mixed_batches(full_fashion_data_dir):
    report = inspect_json("--task", "fashion", "--data-dir", full_fashion_data_dir, "--batch-size", "32",
                          "--batches", str(BATCHES))
    assert report["train_examples"] == 54000  # less the validation split and len(report["class_names"]) == 10
    assert_mixed_like_the_dataset(report)


def test_one_workers_share_text_report_and_contact_sheet(full_oct_tree, tmp_path):
    sheet = tmp_path / "first-batch.png"
    result = inspect("--task", "oct", "--data-dir", os.path.dirname(full_oct_tree), "--image-size", "32",
                     "--validation-fraction", "0", "--batches", "5", "--workers", "3", "--worker-index", "2",
                     "--sheet", str(sheet))
    lines = result.stdout.splitlines()
    assert lines[0].startswith("oct: training input of real data (83484 images), batch 32, worker 3 of 3")
    assert lines[1].split() == ["batch", "CNV", "DME", "DRUSEN", "NORMAL"]
    assert [sum(map(int, line.split()[1:])) for line in lines[2:7]] == [32] * 5
    assert "class mix over 5 batches (160 images) against the dataset's:" in result.stdout
    assert sheet.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_shipped_sample_is_inspected_in_its_recipe_s_batches(tmp_path):
    # Offline, with no dataset in HOME: the training job falls back to the sample and trains it in batches of
    # 32 (its recipe), which the report called batches of 512 (the flag's default).
    offline = {"HTTPS_PROXY": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9"}  # refused at once
    result = inspect("--task", "fashion", "--batches", "2", "--json", env=dict(os.environ, HOME=str(tmp_path),
                                                                                  **offline))
    report = json.loads(result.stdout)
    assert report["data_source"].startswith("real (shipped")
    assert report["batch_size"] == 32 == np.sum(report["class_counts_per_batch"][0])


def test_synthetic_data_says_it_repeats_one_batch():
    report = inspect_json("--task", "fashion", "--synthetic", "--batch-size", "16", "--batches", "3")
    assert report["data_source"] == "synthetic" and report["dataset_class_share"] is None
    assert report["class_counts_per_batch"][0] == report["class_counts_per_batch"][2]


def test_a_folder_of_class_folders_is_inspected_without_writing_a_model_dir(tmp_path):
    from tests.images_data import make_shapes_folder
    data = make_shapes_folder(str(tmp_path / "shapes"), per_class=10)
    result = inspect("--task", "images", "--data-dir", data, "--image-size", "32", "--batch-size", "8",
                     "--batches", "2", "--validation-fraction", "0.2", cwd=tmp_path)
    assert result.stdout.startswith("images: training input of real data (")
    assert sorted(os.listdir(tmp_path)) == ["shapes"]  # no runs/images/split or validation_files.txt


def test_a_worker_index_out_of_range_is_a_flag_error():
    result = subprocess.run([sys.executable, SCRIPT, "--task", "oct", "--workers", "2", "--worker-index", "2"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert "--worker-index 2 must be from 0 to --workers - 1 (1)" in assert_clean_failure(result)


@pytest.mark.parametrize("flags", [["--mixup", "0.2"], ["--augment", "flip"], ["--cutmix=1"],
                                   ["--label-smoothing", "0.1"]])
def test_a_flag_applied_inside_the_model_is_refused_not_silently_left_unshown(flags):
    """The sheet showed unmixed, unaugmented images though the command named --mixup or --augment."""
    result = subprocess.run([sys.executable, SCRIPT, "--task", "fashion", "--synthetic", *flags],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert f"argument {flags[0].split('=')[0]}: applied inside the model" in assert_clean_failure(result)


@pytest.mark.parametrize("attempt", range(3))
def test_a_stopped_inspection_prints_the_batches_it_read_then_ends_as_its_stop(attempt):
    """Ctrl-C or SIGTERM lost every batch counted, minutes into a large --batches. Then, raised from the signal's
    handler inside TensorFlow's iterator, the stop aborted one run in five or so ('free(): invalid next size', exit
    -6, no report): three attempts."""
    process = subprocess.Popen([sys.executable, SCRIPT, "--task", "fashion", "--synthetic", "--batches", str(10 ** 12),
                                "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = queue.Queue()

    def read_stderr():
        for line in iter(process.stderr.readline, ""):
            lines.put(line)
        lines.put(None)
    threading.Thread(target=read_stderr, daemon=True).start()
    try:
        seen, deadline = [], time.monotonic() + 300
        while not (seen and seen[-1].startswith("the first batch came after ")):  # batches are being read
            assert time.monotonic() < deadline, "".join(seen)[-2000:]
            with contextlib.suppress(queue.Empty):
                seen.append(lines.get(timeout=1))
        assert seen[-1].endswith(f"reading {10 ** 12 - 1:,} more\n"), seen[-1]
        process.send_signal(signal.SIGTERM)
        out = process.stdout.read()
        process.wait(timeout=120)
    finally:
        process.kill()
    err = "".join(iter(lambda: lines.get(timeout=60), None))
    assert process.returncode == 143, err[-2000:]
    report = json.loads(out)
    assert report["stopped_early"] and report["batches_asked"] == 10 ** 12
    assert len(report["class_counts_per_batch"]) >= 1 and report["task"] == "fashion"
    assert err.strip().splitlines()[-1] == "inspect_input.py: stopped by SIGTERM"
