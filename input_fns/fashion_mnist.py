"""Fashion-MNIST: the official IDX files, their TFRecord cache and the input_fns over it.

Images are 28x28 grayscale; the input_fns yield ({feature_key: float32 [28, 28, 1]
in [0, 1]}, one-hot float32 [10]) batches.
"""
import json
import os
import shutil
import socket
import tempfile
import urllib.error
import urllib.request

import numpy as np
import tensorflow as tf

from input_fns import idx, locks, records
from input_fns.errors import InputDataError
from input_fns.files import write_json_atomically

IMAGE_SHAPE = (28, 28, 1)
NUM_CLASSES = 10
CLASS_NAMES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
               "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot")
FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}
DOWNLOAD_URL = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/"
# 1,000 real test images shipped with the project (see its README.md for the attribution).
SHIPPED_SAMPLE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "fashion-mnist-sample")
SAMPLE_TRAIN_IMAGES = 800  # of the shipped sample's 1,000, when it stands in for the dataset
# 24 training shards divide evenly among 2, 3, 4, 6 or 8 workers, each reading its own.
NUM_SHARDS = {"train": 24, "test": 2}
TRAIN_ORDER_SEED = 0
DOWNLOAD_LOCK = ".download.lock"
_CACHE_VERSION = 2  # 2: training records in shuffled order, class counts


class DownloadError(InputDataError):
    """The dataset files are absent and could not be downloaded."""


def missing_files(data_dir):
    """Returns the official file names that are not in `data_dir`."""
    return [name for pair in FILES.values() for name in pair
            if not os.path.isfile(os.path.join(data_dir, name))]


def download(data_dir, base_url=DOWNLOAD_URL, timeout=30):
    """Downloads the official files missing from `data_dir`; returns the names it fetched.

    One process at a time downloads (the others wait on a lock in `data_dir`
    and then find the files there). Each file is written under a temporary
    name and renamed when complete, so an interrupted download is never taken
    for a whole file.
    """
    if os.path.exists(data_dir) and not os.path.isdir(data_dir):
        raise InputDataError(f"the data dir {data_dir} is a file, not a folder")
    if not missing_files(data_dir):
        return []
    os.makedirs(data_dir, exist_ok=True)
    fetched = []
    with locks.exclusive(os.path.join(data_dir, DOWNLOAD_LOCK)):
        for name in missing_files(data_dir):
            url = base_url + name
            fd, tmp = tempfile.mkstemp(prefix=f".{name}-", dir=data_dir)
            try:
                with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=timeout) as response:
                    shutil.copyfileobj(response, out)
                os.chmod(tmp, 0o644)
                os.replace(tmp, os.path.join(data_dir, name))
            except (urllib.error.URLError, socket.timeout, ConnectionError) as e:
                raise DownloadError(
                    f"Fashion-MNIST is not in {data_dir} and downloading {url} failed "
                    f"({getattr(e, 'reason', e)})") from None
            finally:
                if os.path.exists(tmp):
                    os.remove(tmp)
            fetched.append(name)
    return fetched


def load_split(data_dir, split):
    """Returns (images uint8 [N, 28, 28], labels uint8 [N]) of `split` ('train' or 'test').

    Raises InputDataError naming the file when the pair is missing, damaged or
    inconsistent (other image size, counts that differ, labels out of range).
    """
    images_name, labels_name = FILES[split]
    images_path = os.path.join(data_dir, images_name)
    labels_path = os.path.join(data_dir, labels_name)
    images = idx.read_idx(images_path, idx.IMAGES_MAGIC)
    labels = idx.read_idx(labels_path, idx.LABELS_MAGIC)
    if images.shape[1:] != IMAGE_SHAPE[:2]:
        raise InputDataError(
            f"{images_path} holds {images.shape[1]}x{images.shape[2]} images; Fashion-MNIST's are 28x28")
    if len(images) != len(labels):
        raise InputDataError(
            f"{images_path} holds {len(images)} images but {labels_path} holds {len(labels)} labels")
    if len(labels) and labels.max() >= NUM_CLASSES:
        raise InputDataError(f"{labels_path} holds label {labels.max()}; Fashion-MNIST labels are 0-9")
    return images, labels


def _fingerprint(data_dir):
    stats = {name: os.stat(os.path.join(data_dir, name)) for pair in FILES.values() for name in pair}
    return {name: [stat.st_size, stat.st_mtime_ns] for name, stat in stats.items()}


def prepare_tfrecords(data_dir, cache_dir=None):
    """Converts the IDX files of `data_dir` to sharded TFRecords once; returns a summary dict.

    The summary maps 'train' and 'test' to {'pattern': file pattern, 'count':
    examples, 'class_counts': examples per class}. Training records are written
    in a shuffled order (seed TRAIN_ORDER_SEED), test records in the IDX order.
    A later call reuses the shards while the IDX files are unchanged (same
    sizes and modification times) and rebuilds them otherwise; one process at
    a time converts, the others wait and reuse its shards.
    """
    cache_dir = cache_dir or os.path.join(data_dir, "tfrecords")
    if os.path.exists(cache_dir) and not os.path.isdir(cache_dir):
        raise InputDataError(f"the cache dir {cache_dir} is a file; pass --cache-dir with a folder")
    fingerprint = _fingerprint(data_dir)
    splits = _reusable_splits(cache_dir, fingerprint)
    if splits:
        return splits
    os.makedirs(cache_dir, exist_ok=True)
    with locks.exclusive(os.path.join(cache_dir, ".convert.lock")):
        return _reusable_splits(cache_dir, fingerprint) or _convert(data_dir, cache_dir, fingerprint)


def _reusable_splits(cache_dir, fingerprint):
    try:
        with open(os.path.join(cache_dir, "manifest.json")) as f:
            manifest = json.load(f)
        if (manifest.get("version") == _CACHE_VERSION and manifest.get("source") == fingerprint
                and all(tf.io.gfile.glob(s["pattern"]) for s in manifest["splits"].values())):
            return manifest["splits"]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass  # no usable cache: build it
    return None


def _convert(data_dir, cache_dir, fingerprint):
    records.remove_partial_shards(cache_dir)  # of a conversion that was killed; we hold the lock
    splits = {}
    for split in FILES:
        images, labels = load_split(data_dir, split)
        order = records.shuffled_order(len(labels), TRAIN_ORDER_SEED) if split == "train" else range(len(labels))
        records.write_shards((records.serialize_image_example(images[i], labels[i]) for i in order),
                             cache_dir, split, NUM_SHARDS[split])
        splits[split] = {"pattern": records.shard_pattern(cache_dir, split), "count": int(len(labels)),
                         "class_counts": np.bincount(labels, minlength=NUM_CLASSES).tolist()}
    manifest = {"version": _CACHE_VERSION, "source": fingerprint, "train_order_seed": TRAIN_ORDER_SEED,
                "splits": splits}
    write_json_atomically(os.path.join(cache_dir, "manifest.json"), manifest)
    return splits


def make_parse_fn(feature_key="image"):
    """Returns a function from a batch of serialized Examples to ({feature_key: images}, one-hot labels)."""
    def parse(serialized):
        images, labels = records.parse_image_examples(serialized, IMAGE_SHAPE)
        images = tf.cast(images, tf.float32) / 255.0
        return {feature_key: images}, tf.one_hot(labels, NUM_CLASSES, dtype=tf.float32)

    return parse


def make_input_fn(file_pattern, batch_size, training, feature_key="image", shuffle_buffer=5000, seed=None):
    """Returns an Estimator input_fn over Fashion-MNIST TFRecords matching `file_pattern`.

    The records (about 50 MB for the whole training set) are kept in memory
    after the first epoch; see records.make_record_input_fn for the order.
    """
    return records.make_record_input_fn(file_pattern, make_parse_fn(feature_key), batch_size,
                                        training, shuffle_buffer=shuffle_buffer, seed=seed,
                                        cache_in_memory=True)


def write_split(data_dir, split, images, labels):
    """Writes images and labels as the official IDX pair of `split` in `data_dir`; returns the paths."""
    os.makedirs(data_dir, exist_ok=True)
    return [idx.write_idx(os.path.join(data_dir, name), np.asarray(array, np.uint8))
            for name, array in zip(FILES[split], (images, labels))]


def split_sample(source_dir, out_dir, num_train, seed=0):
    """Splits the test-file sample in `source_dir` into train and test IDX pairs in `out_dir`.

    A sample such as SHIPPED_SAMPLE_DIR holds only t10k files; this makes a data
    dir the job can train on. Returns (train count, test count).
    """
    images, labels = load_split(source_dir, "test")
    if not 0 < num_train < len(labels):
        raise ValueError(f"num_train must be between 1 and {len(labels) - 1}, got {num_train}")
    order = np.random.default_rng(seed).permutation(len(labels))
    train, test = order[:num_train], order[num_train:]
    os.makedirs(out_dir, exist_ok=True)
    write_split(out_dir, "train", images[train], labels[train])
    write_split(out_dir, "test", images[test], labels[test])
    return len(train), len(test)


def unpack_shipped_sample(out_dir):
    """Makes `out_dir` a data dir of the shipped sample, SAMPLE_TRAIN_IMAGES training and the rest
    test images (seed 0), unless it is one already; returns `out_dir`."""
    os.makedirs(out_dir, exist_ok=True)
    with locks.exclusive(os.path.join(out_dir, DOWNLOAD_LOCK)):
        if missing_files(out_dir):
            staging = tempfile.mkdtemp(prefix=".sample-", dir=out_dir)
            try:
                split_sample(SHIPPED_SAMPLE_DIR, staging, SAMPLE_TRAIN_IMAGES)
                for name in os.listdir(staging):  # each file whole or absent
                    os.replace(os.path.join(staging, name), os.path.join(out_dir, name))
            finally:
                shutil.rmtree(staging, ignore_errors=True)
    return out_dir
