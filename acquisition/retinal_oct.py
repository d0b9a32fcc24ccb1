"""The Kermany 2018 retinal OCT dataset (Kaggle `paultimothymooney/kermany2018`) on disk.

`ensure_dataset` finds an `OCT2017`-style tree (`train/` and `test/` with one
folder per class) under a data dir, whatever the archive's nesting, or
downloads (acquisition.kaggle) and unpacks it. The jobs read the tree through
input_fns.image_folder, or shards of it (acquisition.shards).
"""
import os
import shutil
import tempfile
import uuid
import zipfile

from acquisition import kaggle, locks, storage
from acquisition.errors import DownloadError, InputDataError

DATASET = "paultimothymooney/kermany2018"
CLASS_NAMES = ("CNV", "DME", "DRUSEN", "NORMAL")
CLEAN_ROOT = "OCT2017"  # the archive's own folder is "OCT2017 ", with a trailing space
DOWNLOAD_LOCK = ".download.lock"
STALL_SECONDS = 120  # a download that writes nothing for this long has stalled
IMAGE_PATTERN = "*.jpeg"  # skips .DS_Store and anything else that is not an image
# 129 real scans shipped with the project, in class folders (CC BY 4.0: see its README.md).
SHIPPED_SAMPLE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "oct-sample")
FALLBACK = "pass --data-dir with the OCT2017 folder already on disk"


def kaggle_api():
    """Returns a KaggleApi signed in to download the dataset; raises DownloadError without credentials."""
    return kaggle.sign_in(DATASET, FALLBACK)


def find_split_root(directory):
    """Returns the folder under `directory` that holds `train/` and `test/` class folders, or None.

    The search goes level by level and never enters hidden folders (such as
    the staging folder of an unfinished download); the shallowest match wins,
    so nested mirrors of the tree do not matter.
    """
    level = [directory] if storage.isdir(directory) else []
    while level:
        below = []
        for current in level:
            try:
                subdirs = sorted(n for n in storage.listdir(current)
                                 if storage.is_data_folder(n) and storage.isdir(storage.join(current, n)))
            except OSError:
                continue
            if {"train", "test"} <= set(subdirs) and any(
                    storage.isdir(storage.join(current, "train", c)) for c in CLASS_NAMES):
                return current
            below += [storage.join(current, d) for d in subdirs]
        level = below
    return None


class SampleTooSmall(ValueError):
    """A class of the sample has no more scans than the test split takes of each."""


def make_sample_tree(root, sample=SHIPPED_SAMPLE_DIR, test_per_class=6):
    """Copies the class folders of `sample` into an OCT2017-style tree at `root`, which must not exist: the last
    `test_per_class` scans of each class (in name order) go to test/, the rest to train/. The tree is made in a
    hidden folder beside `root` and renamed into place whole: a failure or a stop leaves nothing that looks like
    data. Returns (training scans, test scans) written; raises InputDataError when `sample` lacks a class, and
    SampleTooSmall when a class has no more scans than `test_per_class`."""
    chosen = {}
    for name in CLASS_NAMES:
        try:
            files = sorted(f for f in os.listdir(os.path.join(sample, name)) if f.lower().endswith(".jpeg"))
        except OSError as e:
            raise InputDataError(f"the sample {sample} has no readable folder {name} ({e.strerror})") from None
        if len(files) <= test_per_class:
            raise SampleTooSmall(f"the sample {sample} holds {len(files)} {name} scans, not more than the "
                                 f"{test_per_class} per class the test split takes")
        chosen[name] = {"train": files[:-test_per_class], "test": files[-test_per_class:]}
    parent = os.path.dirname(os.path.abspath(root))
    os.makedirs(parent, exist_ok=True)
    staging = os.path.join(parent, f".{os.path.basename(root)}.{uuid.uuid4().hex[:8]}")
    os.mkdir(staging)
    try:
        for name, splits in chosen.items():
            for split, files in splits.items():
                os.makedirs(os.path.join(staging, split, name))
                for f in files:
                    shutil.copyfile(os.path.join(sample, name, f), os.path.join(staging, split, name, f))
        os.rename(staging, root)  # (fails where `root` exists and holds anything)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return tuple(sum(len(splits[split]) for splits in chosen.values()) for split in ("train", "test"))


def split_pattern(root, split):
    """Returns the file pattern of the `split` images under a dataset root."""
    return storage.join(root, split, "*", IMAGE_PATTERN)


def ensure_dataset(data_dir, api_factory=kaggle_api, stall_seconds=STALL_SECONDS):
    """Returns the dataset root (with train/ and test/) under `data_dir`, downloading it if absent.

    One process at a time downloads: the others (the tasks of a cluster, a
    second run) wait on a lock in `data_dir`, then use what it unpacked. The
    archive is downloaded and unpacked in a hidden staging folder and its tree
    moved to <data_dir>/OCT2017 only when complete, so an interrupted run leaves
    nothing that looks like data; the next run removes its staging folder and
    downloads anew.
    """
    root = find_split_root(data_dir)
    if root:
        return root
    if storage.is_url(data_dir):
        storage.exists(data_dir)  # a bucket out of reach raises here, in words saying why (pipeline.cli)
        raise InputDataError(f"{data_dir} holds no OCT2017 tree (a folder with train/ and test/ class folders "
                             f"{', '.join(CLASS_NAMES)}); the dataset is downloaded into a local --data-dir only: "
                             "download it there, copy it to the bucket, and pass that folder")
    if os.path.exists(data_dir) and not os.path.isdir(data_dir):
        raise InputDataError(f"the data dir {data_dir} is a file, not a folder")
    if os.path.isdir(data_dir) and [n for n in os.listdir(data_dir) if not n.startswith(".")]:
        raise InputDataError(f"{data_dir} holds no OCT2017 tree (a folder with train/ and test/ class folders "
                             f"{', '.join(CLASS_NAMES)}); pass --data-dir with such a folder, or an empty or new "
                             "one to download the dataset into")
    made = not os.path.isdir(data_dir)
    os.makedirs(data_dir, exist_ok=True)
    with locks.exclusive_leaving_no_trace(os.path.join(data_dir, DOWNLOAD_LOCK), made):
        root = find_split_root(data_dir)  # downloaded by the process this one waited for
        if root:
            return root
        for stale in (d for d in os.listdir(data_dir) if d.startswith(".download-")):
            shutil.rmtree(os.path.join(data_dir, stale), ignore_errors=True)  # its owner is dead: we hold the lock
        return _download(data_dir, api_factory, stall_seconds)


def _download(data_dir, api_factory, stall_seconds):
    staging = tempfile.mkdtemp(prefix=".download-", dir=data_dir)
    try:
        archive_path = kaggle.download_archive(DATASET, staging, api_factory, stall_seconds, FALLBACK)
        unpacked = os.path.join(staging, "unpacked")
        try:
            with zipfile.ZipFile(archive_path) as archive:
                archive.extractall(unpacked)
        except zipfile.BadZipFile as e:
            raise DownloadError(f"the downloaded archive is damaged ({e}); run again to download it anew") from None
        found = find_split_root(unpacked)
        if not found:
            raise DownloadError(f"the archive of {DATASET} has no folder with train/ and test/ class folders")
        os.replace(found, os.path.join(data_dir, CLEAN_ROOT))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return os.path.join(data_dir, CLEAN_ROOT)
