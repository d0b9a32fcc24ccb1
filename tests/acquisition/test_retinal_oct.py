import glob
import os
import shutil
import re
import signal
import subprocess
import sys
import time
import zipfile

import pytest
import requests

from acquisition import retinal_oct
from acquisition.errors import DownloadError, InputDataError
from acquisition import image_checks
from tests.conftest import OCT_CLASSES, ROOT


class FakeKaggleApi:
    """Writes a small zip laid out like the real archive: 'OCT2017 ' with a trailing
    space, nested again under oct2017/, and .DS_Store files in the class folders."""

    def __init__(self, sample, fail_with=None, broken_zip=False, seconds=0.0, calls_file=None, padding=0):
        self.sample, self.fail_with, self.broken_zip, self.calls = sample, fail_with, broken_zip, 0
        self.seconds, self.calls_file, self.padding = seconds, calls_file, padding

    def dataset_download_files(self, dataset, path, quiet, unzip):
        self.calls += 1
        assert dataset == "paultimothymooney/kermany2018" and not unzip
        if self.calls_file:
            with open(self.calls_file, "a") as f:
                f.write(f"{os.getpid()}\n")
        time.sleep(self.seconds)  # a download takes a while: long enough for another task to start one
        if self.fail_with:
            raise self.fail_with
        archive_path = os.path.join(path, "kermany2018.zip")
        if self.broken_zip:
            with open(archive_path, "wb") as f:
                f.write(b"PK\x03\x04 cut short")
            return
        with zipfile.ZipFile(archive_path, "w") as archive:
            for top in ("OCT2017 ", "oct2017/OCT2017 "):
                for split in ("train", "test", "val"):
                    for name in OCT_CLASSES:
                        files = sorted(os.listdir(os.path.join(self.sample, name)))[:3]
                        for f in files:
                            archive.write(os.path.join(self.sample, name, f), f"{top}/{split}/{name}/{f}")
                        archive.writestr(f"{top}/{split}/{name}/.DS_Store", b"\x00\x00\x00\x01Bud1")
            for i in range(self.padding):  # many more entries: unpacking them takes seconds
                archive.writestr(f"OCT2017 /val/NORMAL/padding-{i}.txt", b"x")


def test_download_resolves_the_archive_quirks_into_a_clean_tree(oct_sample, tmp_path):
    api = FakeKaggleApi(oct_sample)
    root = retinal_oct.ensure_dataset(str(tmp_path), api_factory=lambda: api)
    assert root == str(tmp_path / "OCT2017")
    assert sorted(os.listdir(root)) == ["test", "train", "val"]
    assert sorted(os.listdir(tmp_path)) == [retinal_oct.DOWNLOAD_LOCK, "OCT2017"]  # no archive, staging or copy left
    scan = image_checks.scan_folder(retinal_oct.split_pattern(root, "train"), retinal_oct.CLASS_NAMES)
    assert scan.class_counts() == {name: 3 for name in OCT_CLASSES} and scan.bad_files == []
    # Once there, the data is not downloaded again.
    assert retinal_oct.ensure_dataset(str(tmp_path), api_factory=lambda: pytest.fail("downloaded twice")) == root
    assert api.calls == 1


def test_a_tree_unpacked_by_hand_is_found_whatever_its_nesting(oct_sample, tmp_path):
    nested = tmp_path / "oct2017" / "OCT2017 "
    for split in ("train", "test"):
        (nested / split / "CNV").mkdir(parents=True)
    assert retinal_oct.find_split_root(str(tmp_path)) == str(nested)
    assert retinal_oct.find_split_root(str(tmp_path / "absent")) is None


@pytest.mark.parametrize("failure,message", [
    (requests.exceptions.ConnectionError("Max retries exceeded with url"), "check the network"),
    (requests.exceptions.HTTPError("403 Client Error", response=type("R", (), {"status_code": 403})()),
     r"HTTP 403\): check your credentials and accept the dataset's terms"),
])
def test_download_failures_are_clear_and_leave_nothing_behind(oct_sample, tmp_path, failure, message):
    made = tmp_path / "new" / "oct"
    for data_dir in (tmp_path, made):
        with pytest.raises(DownloadError, match=message):
            retinal_oct.ensure_dataset(str(data_dir), api_factory=lambda: FakeKaggleApi(oct_sample, fail_with=failure))
    assert os.listdir(tmp_path) == ["new"] and os.listdir(tmp_path / "new") == []  # the folder it made goes


def test_an_interrupted_or_damaged_download_is_redone_on_the_next_run(oct_sample, tmp_path):
    (tmp_path / ".download-killed-earlier").mkdir()  # what a killed run leaves
    with pytest.raises(DownloadError, match="damaged"):
        retinal_oct.ensure_dataset(str(tmp_path), api_factory=lambda: FakeKaggleApi(oct_sample, broken_zip=True))
    assert os.listdir(tmp_path) == []
    root = retinal_oct.ensure_dataset(str(tmp_path), api_factory=lambda: FakeKaggleApi(oct_sample))
    assert os.path.isdir(os.path.join(root, "train", "CNV"))


def test_missing_kaggle_credentials_give_one_clear_message(tmp_path):
    # A real `kaggle` import in a clean process with an empty home: no kaggle.json, no variables.
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAGGLE")}
    env.update(HOME=str(tmp_path), KAGGLE_CONFIG_DIR=str(tmp_path / ".kaggle"))
    code = ("from acquisition import retinal_oct\nfrom acquisition.errors import DownloadError\n"
            "try:\n    retinal_oct.kaggle_api()\nexcept DownloadError as e:\n    print('ERROR', e)")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.stdout.startswith("ERROR no Kaggle credentials"), result.stdout + result.stderr
    assert "kaggle.json" in result.stdout and "--data-dir" in result.stdout
    assert result.stdout.count("\n") == 1  # kaggle's own help text is not printed


DOWNLOADER = """
import sys
sys.path.insert(0, {root!r})
from acquisition import retinal_oct
from tests.acquisition.test_retinal_oct import FakeKaggleApi
api = FakeKaggleApi({sample!r}, seconds={seconds}, calls_file={calls_file!r}, padding={padding})
print(retinal_oct.ensure_dataset({data_dir!r}, api_factory=lambda: api), flush=True)
"""


def start_download(sample, data_dir, seconds=0.0, calls_file=None, padding=0):
    code = DOWNLOADER.format(root=ROOT, sample=sample, data_dir=data_dir, seconds=seconds, calls_file=calls_file,
                             padding=padding)
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_download_killed_while_unpacking_is_never_taken_for_the_dataset(oct_sample, tmp_path):
    # A real kill during extraction: the staging folder holds part of a train/test tree.
    process = start_download(oct_sample, str(tmp_path), padding=30000)
    deadline = time.monotonic() + 60
    while not glob.glob(str(tmp_path / ".download-*" / "unpacked" / "*" / "test" / "*" / "*.jpeg")):
        assert process.poll() is None and time.monotonic() < deadline, process.stderr.read()
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)
    process.wait()
    staged = glob.glob(str(tmp_path / ".download-*" / "unpacked"))
    assert staged, "the kill came too late to leave a staging tree"
    assert retinal_oct.find_split_root(str(tmp_path)) is None
    root = retinal_oct.ensure_dataset(str(tmp_path), api_factory=lambda: FakeKaggleApi(oct_sample))
    assert root == str(tmp_path / "OCT2017")
    assert not glob.glob(str(tmp_path / ".download-*"))  # the dead run's staging folder is gone


def test_two_tasks_downloading_at_once_end_with_one_whole_dataset(oct_sample, tmp_path):
    calls = tmp_path / "calls"
    data_dir = tmp_path / "data"
    tasks = [start_download(oct_sample, str(data_dir), seconds=2.0, calls_file=str(calls)) for _ in range(2)]
    outputs = [task.communicate(timeout=120) for task in tasks]
    assert [task.returncode for task in tasks] == [0, 0], outputs
    assert [out.strip() for out, _ in outputs] == [str(data_dir / "OCT2017")] * 2
    assert len(calls.read_text().split()) == 1  # one task downloaded, the other waited and used its tree
    scan = image_checks.scan_folder(retinal_oct.split_pattern(str(data_dir / "OCT2017"), "train"), OCT_CLASSES)
    assert scan.class_counts() == dict.fromkeys(OCT_CLASSES, 3) and not scan.problems
    assert sorted(os.listdir(data_dir)) == [retinal_oct.DOWNLOAD_LOCK, "OCT2017"]


class HangingKaggleApi(FakeKaggleApi):
    """A network that accepts the connection and then never answers."""

    def dataset_download_files(self, dataset, path, quiet, unzip):
        time.sleep(600)


class TrickleKaggleApi(FakeKaggleApi):
    """A slow network: the archive arrives in pieces, 0.3 s apart."""

    def dataset_download_files(self, dataset, path, quiet, unzip):
        with open(os.path.join(path, "partial"), "wb") as f:
            for _ in range(8):
                f.write(b"x" * 100_000)
                f.flush()
                time.sleep(0.3)
        os.remove(os.path.join(path, "partial"))
        super().dataset_download_files(dataset, path, quiet, unzip)


def test_a_download_that_stalls_gives_up_with_one_clear_error(oct_sample, tmp_path):
    started = time.monotonic()
    with pytest.raises(DownloadError, match=r"made no progress for 1 s; check the network"):
        retinal_oct.ensure_dataset(str(tmp_path), api_factory=lambda: HangingKaggleApi(oct_sample), stall_seconds=1)
    assert time.monotonic() - started < 30
    assert os.listdir(tmp_path) == []


def test_a_slow_download_that_progresses_is_reported_and_finishes(oct_sample, tmp_path, caplog):
    caplog.set_level("INFO")
    root = retinal_oct.ensure_dataset(str(tmp_path), api_factory=lambda: TrickleKaggleApi(oct_sample),
                                      stall_seconds=1)
    assert root == str(tmp_path / "OCT2017")
    progress = [r.getMessage() for r in caplog.records if r.getMessage().startswith("downloading paultimothymooney")]
    assert progress and re.search(r"\d+ MB so far, [\d.]+ MB/s", progress[0])


def test_the_shipped_sample_lays_out_an_oct2017_tree(tmp_path):
    root = str(tmp_path / "OCT2017")
    assert retinal_oct.make_sample_tree(root) == (105, 24)
    assert retinal_oct.find_split_root(str(tmp_path)) == root
    assert sorted(os.listdir(os.path.join(root, "test", "DME"))) == sorted(
        os.listdir(os.path.join(retinal_oct.SHIPPED_SAMPLE_DIR, "DME")))[-6:]


def test_a_sample_too_small_for_the_test_split_leaves_no_tree_and_a_stop_none_either(tmp_path, monkeypatch):
    """It copied three classes before it found the fourth too small, and left a tree its rerun refused."""
    sample = tmp_path / "sample"
    for name, count in (("CNV", 9), ("DME", 9), ("DRUSEN", 9), ("NORMAL", 6)):
        (sample / name).mkdir(parents=True)
        for i in range(count):
            (sample / name / f"{name}-1-{i}.jpeg").write_bytes(b"x")
    with pytest.raises(ValueError, match="holds 6 NORMAL scans, not more than the 6 per class"):
        retinal_oct.make_sample_tree(str(tmp_path / "out" / "OCT2017"), str(sample))
    assert not (tmp_path / "out").exists() or os.listdir(tmp_path / "out") == []
    copies, copy = [], shutil.copyfile

    def stopped_copy(source, target):  # a stop at the last class's test scans
        copies.append(target)
        if "NORMAL" in target and "test" in target:
            raise KeyboardInterrupt
        return copy(source, target)
    monkeypatch.setattr(retinal_oct.shutil, "copyfile", stopped_copy)
    with pytest.raises(KeyboardInterrupt):
        retinal_oct.make_sample_tree(str(tmp_path / "out" / "OCT2017"), str(sample), test_per_class=2)
    assert len(copies) > 20 and os.listdir(tmp_path / "out") == []


def test_a_sample_without_a_class_is_named(tmp_path):
    sample = tmp_path / "sample"
    for name in ("CNV", "DME", "DRUSEN"):
        (sample / name).mkdir(parents=True)
        for i in range(7):
            (sample / name / f"{name}-1-{i}.jpeg").write_bytes(b"")
    with pytest.raises(InputDataError, match="no readable folder NORMAL"):
        retinal_oct.make_sample_tree(str(tmp_path / "OCT2017"), str(sample))
