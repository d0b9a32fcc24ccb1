"""The Kermany 2018 retinal OCT dataset (Kaggle `paultimothymooney/kermany2018`).

Getting it: `ensure_dataset` finds an `OCT2017`-style tree (`train/` and `test/`
with one folder per class) under a data dir, whatever the archive's nesting,
or downloads and unpacks it with the `kaggle` package. Reading it: the image
folders through `input_fns.image_folder`, or TFRecord shards of images already
resized (`write_resized_shards`) through `make_records_input_fn`.
"""
import contextlib
import io
import logging
import os
import shutil
import signal
import tempfile
import threading
import time
import zipfile

import tensorflow as tf

from input_fns import image_folder, locks, records
from input_fns.errors import InputDataError

DATASET = "paultimothymooney/kermany2018"
CLASS_NAMES = ("CNV", "DME", "DRUSEN", "NORMAL")
DEFAULT_DATA_DIR = os.path.join(os.path.expanduser("~"), ".keras", "datasets", "kermany2018")
CLEAN_ROOT = "OCT2017"  # the archive's own folder is "OCT2017 ", with a trailing space
DOWNLOAD_LOCK = ".download.lock"
STALL_SECONDS = 120  # a download that writes nothing for this long has stalled
IMAGE_PATTERN = "*.jpeg"  # skips .DS_Store and anything else that is not an image
# 129 real scans shipped with the project, in class folders (CC BY 4.0: see its README.md).
SHIPPED_SAMPLE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "oct-sample")
_CREDENTIALS_HELP = (
    "put kaggle.json (Kaggle > Settings > API > Create New Token) in ~/.kaggle/ or set "
    "KAGGLE_USERNAME and KAGGLE_KEY, or pass --data-dir with the OCT2017 folder already on disk")


log = logging.getLogger(__name__)


class DownloadError(InputDataError):
    """The dataset is not on disk and could not be downloaded."""


def find_split_root(directory):
    """Returns the folder under `directory` that holds `train/` and `test/` class folders, or None.

    The search goes level by level and never enters hidden folders (such as
    the staging folder of an unfinished download); the shallowest match wins,
    so nested mirrors of the tree do not matter.
    """
    level = [directory] if os.path.isdir(directory) else []
    while level:
        below = []
        for current in level:
            try:
                subdirs = sorted(e.name for e in os.scandir(current) if e.is_dir() and not e.name.startswith("."))
            except OSError:
                continue
            if {"train", "test"} <= set(subdirs) and any(
                    os.path.isdir(os.path.join(current, "train", c)) for c in CLASS_NAMES):
                return current
            below += [os.path.join(current, d) for d in subdirs]
        level = below
    return None


def make_sample_tree(root, sample=SHIPPED_SAMPLE_DIR, test_per_class=6):
    """Copies the class folders of `sample` into an OCT2017-style tree at `root`: the last
    `test_per_class` scans of each class (in name order) go to test/, the rest to train/.
    Returns (training scans, test scans) written; raises InputDataError when `sample` lacks a class."""
    counts = [0, 0]
    for name in CLASS_NAMES:
        try:
            files = sorted(f for f in os.listdir(os.path.join(sample, name)) if f.lower().endswith(".jpeg"))
        except OSError as e:
            raise InputDataError(f"the sample {sample} has no readable folder {name} ({e.strerror})") from None
        if len(files) <= test_per_class:
            raise InputDataError(f"the sample {sample} holds {len(files)} {name} scans, not more than the "
                                 f"{test_per_class} per class the test split takes")
        for i, (split, chosen) in enumerate((("train", files[:-test_per_class]), ("test", files[-test_per_class:]))):
            os.makedirs(os.path.join(root, split, name), exist_ok=True)
            for f in chosen:
                shutil.copyfile(os.path.join(sample, name, f), os.path.join(root, split, name, f))
            counts[i] += len(chosen)
    return tuple(counts)


def split_pattern(root, split):
    """Returns the file pattern of the `split` images under a dataset root."""
    return os.path.join(root, split, "*", IMAGE_PATTERN)


def kaggle_api():
    """Returns an authenticated KaggleApi; raises DownloadError when there are no credentials."""
    sink = io.StringIO()
    try:
        # `import kaggle` authenticates at import time and prints a help text on
        # failure; the message below replaces it.
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            from kaggle.api.kaggle_api_extended import KaggleApi
            api = KaggleApi()
            api.authenticate()
    except SystemExit:
        raise DownloadError(f"no Kaggle credentials to download {DATASET}: {_CREDENTIALS_HELP}") from None
    except Exception as e:  # token checks reach the network; offline they fail here
        raise DownloadError(f"Kaggle sign-in failed ({_first_line(e)}): {_CREDENTIALS_HELP}") from None
    return api


def _first_line(error):
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def _download_error(error):
    status = getattr(getattr(error, "response", None), "status_code", None)
    if status in (401, 403):
        return DownloadError(
            f"Kaggle refused the download of {DATASET} (HTTP {status}): check your credentials and "
            f"accept the dataset's terms at https://www.kaggle.com/datasets/{DATASET}, "
            "or pass --data-dir with the OCT2017 folder already on disk")
    return DownloadError(
        f"cannot download {DATASET} from Kaggle ({_first_line(error)}); check the network, "
        "or pass --data-dir with the OCT2017 folder already on disk")


class _Stalled(Exception):
    pass


@contextlib.contextmanager
def watch_progress(folder, stall_seconds, every_seconds=10.0, report=None):
    """Logs the bytes written under `folder` and their rate every `every_seconds` while the block
    runs, and ends the block with _Stalled when none were written for `stall_seconds`.

    The Kaggle client sets no timeout on its requests, so a network that accepts a
    connection but never answers would hang it forever. This works by SIGALRM,
    in the main thread only (elsewhere the block runs unwatched).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    report = report or log.info
    start = last_change = time.monotonic()
    state = {"bytes": 0}

    def tick(signum, frame):
        now = time.monotonic()
        size = sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(folder) for f in files
                   if os.path.exists(os.path.join(d, f)))
        nonlocal last_change
        if size > state["bytes"]:
            state["bytes"], last_change = size, now
            report(f"downloading {DATASET}: {size / 1e6:.0f} MB so far, {size / 1e6 / (now - start):.1f} MB/s")
        elif now - last_change >= stall_seconds:
            raise _Stalled()

    previous = signal.signal(signal.SIGALRM, tick)
    signal.setitimer(signal.ITIMER_REAL, every_seconds, every_seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


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
    if os.path.exists(data_dir) and not os.path.isdir(data_dir):
        raise InputDataError(f"the data dir {data_dir} is a file, not a folder")
    if os.path.isdir(data_dir) and [n for n in os.listdir(data_dir) if not n.startswith(".")]:
        raise InputDataError(f"{data_dir} holds no OCT2017 tree (a folder with train/ and test/ class folders "
                             f"{', '.join(CLASS_NAMES)}); pass --data-dir with such a folder, or an empty or new "
                             "one to download the dataset into")
    os.makedirs(data_dir, exist_ok=True)
    with locks.exclusive(os.path.join(data_dir, DOWNLOAD_LOCK)):
        root = find_split_root(data_dir)  # downloaded by the process this one waited for
        if root:
            return root
        for stale in (d for d in os.listdir(data_dir) if d.startswith(".download-")):
            shutil.rmtree(os.path.join(data_dir, stale), ignore_errors=True)  # its owner is dead: we hold the lock
        return _download(data_dir, api_factory, stall_seconds)


def _download(data_dir, api_factory, stall_seconds):
    staging = tempfile.mkdtemp(prefix=".download-", dir=data_dir)
    try:
        try:
            with watch_progress(staging, stall_seconds, every_seconds=min(10.0, stall_seconds / 2)):
                api = api_factory()
                api.dataset_download_files(DATASET, path=staging, quiet=True, unzip=False)
        except _Stalled:
            raise DownloadError(f"the download of {DATASET} from Kaggle made no progress for {stall_seconds:g} s; "
                                "check the network (a proxy or firewall that holds connections open?), or pass "
                                "--data-dir with the OCT2017 folder already on disk") from None
        except DownloadError:
            raise
        except Exception as e:  # requests' ConnectionError / HTTPError, kagglesdk errors
            raise _download_error(e) from None
        archives = [f for f in os.listdir(staging) if f.endswith(".zip")]
        if not archives:
            raise DownloadError(f"the Kaggle download of {DATASET} produced no zip archive")
        unpacked = os.path.join(staging, "unpacked")
        try:
            with zipfile.ZipFile(os.path.join(staging, archives[0])) as archive:
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


def write_resized_shards(scan, image_size, out_dir, split, num_shards, channels=1, fast_decode=False, order=None):
    """Writes the good images of a FolderScan, decoded and resized, as TFRecord shards; returns the paths.

    Each record holds the uint8 image bytes at `image_size` and the class index.
    Records go in the scan's sorted order, or in `order` (a permutation of the
    good files' indices, see records.shuffled_order).
    """
    files, labels = scan.good()
    if order is not None:
        files, labels = [files[i] for i in order], [labels[i] for i in order]
    dataset = tf.data.Dataset.from_tensor_slices(files).map(
        lambda path: image_folder.decode_and_resize(tf.io.read_file(path), image_size, channels, fast_decode),
        num_parallel_calls=tf.data.AUTOTUNE).batch(256).prefetch(2)  # batches: less per-image overhead
    images = (image for batch in dataset.as_numpy_iterator() for image in batch)
    serialized = (records.serialize_image_example(image, label) for image, label in zip(images, labels))
    return records.write_shards(serialized, out_dir, split, num_shards)


def make_records_input_fn(file_pattern, image_size, batch_size, training, num_classes=len(CLASS_NAMES),
                          channels=1, feature_key="image", seed=None):
    """Returns an Estimator input_fn over shards written by `write_resized_shards`: batches
    of ({feature_key: uint8 [batch, h, w, channels]}, one-hot labels), as image_folder's."""
    shape = tuple(image_size) + (channels,)

    def parse(serialized):  # a batch of records
        images, labels = records.parse_image_examples(serialized, shape)
        return {feature_key: images}, tf.one_hot(labels, num_classes)

    return records.make_record_input_fn(file_pattern, parse, batch_size, training, seed=seed)
