"""Fashion-MNIST on disk: the official IDX files (downloaded when absent, or the shipped sample),
checked, and converted once to image shards (acquisition.shards) that input_fns.fashion_mnist reads.

Images are 28x28 grayscale uint8, labels 0-9.
"""
import os
import shutil
import tempfile

import numpy as np

from acquisition import class_folders, idx, locks, shards
from acquisition.errors import InputDataError
from acquisition.files import download_file

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
VALIDATION_SEED = 0  # the validation split is drawn with a fixed seed: the same images on every run
DOWNLOAD_LOCK = ".download.lock"


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
    made = not os.path.isdir(data_dir)
    os.makedirs(data_dir, exist_ok=True)
    fetched = []
    folder_url = base_url if base_url.endswith("/") else base_url + "/"  # (--download-url file:///a/folder, too)
    with locks.exclusive_leaving_no_trace(os.path.join(data_dir, DOWNLOAD_LOCK), made):
        for name in missing_files(data_dir):
            download_file(folder_url + name, os.path.join(data_dir, name), timeout,
                          f"Fashion-MNIST is not in {data_dir}")
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


def prepare_shards(data_dir, cache_dir=None):
    """Converts the IDX files of `data_dir` to image shards once; returns the manifest's splits.

    The splits map 'train' and 'test' to {'pattern': file pattern, 'count':
    examples, 'class_counts': examples per class, ...}. Training records are
    written in a shuffled order (seed TRAIN_ORDER_SEED), test records in the IDX
    order. A later call reuses the shards while the IDX files are unchanged
    (same sizes and modification times) and rebuilds them otherwise (the rule
    of acquisition.shards.prepare).
    """
    cache_dir = cache_dir or os.path.join(data_dir, "tfrecords")
    if os.path.exists(cache_dir) and not os.path.isdir(cache_dir):
        raise InputDataError(f"the cache dir {cache_dir} is a file; pass --cache-dir with a folder")
    source = {"dataset": "fashion-mnist", "files": shards.fingerprint(
        [os.path.join(data_dir, name) for pair in FILES.values() for name in pair]),
              "train_order_seed": TRAIN_ORDER_SEED}

    def write_splits(directory):
        splits = {}
        for split in FILES:
            images, labels = load_split(data_dir, split)
            order = shards.shuffled_order(len(labels), TRAIN_ORDER_SEED) if split == "train" \
                else np.arange(len(labels))
            splits[split] = shards.write_split((images[i] for i in order), labels[order], directory, split,
                                               NUM_SHARDS[split], NUM_CLASSES, keep_order=split == "test")
        return splits, []

    manifest, _ = shards.prepare(cache_dir, source, IMAGE_SHAPE, CLASS_NAMES, write_splits)
    return manifest["splits"]


def prepare_validation_shards(data_dir, cache_dir, fraction, seed=VALIDATION_SEED):
    """Returns {'train', 'validation'} -> {'pattern', 'count', 'class_counts', ...}: the training images
    split, stratified by class and drawn with `seed`, into `fraction` held out for validation and the
    rest, written once as shards in a folder of their own under the cache dir (prepare_shards' rule:
    reused while the training IDX files are unchanged)."""
    cache_dir = cache_dir or os.path.join(data_dir, "tfrecords")
    files = [os.path.join(data_dir, name) for name in FILES["train"]]
    source = {"dataset": "fashion-mnist training split", "files": shards.fingerprint(files),
              "validation_fraction": fraction, "seed": seed}

    def write_splits(directory):
        images, labels = load_split(data_dir, "train")
        sides = class_folders.split_files(list(range(len(labels))), labels.tolist(), fraction, seed,
                                          held_out=("validation", "--validation-fraction"), class_names=CLASS_NAMES)
        train = [i for i, _ in sides["train"]]
        orders = {"train": [train[k] for k in shards.shuffled_order(len(train), seed)],
                  "validation": [i for i, _ in sides["test"]]}
        return {side: shards.write_split((images[i] for i in order), labels[order], directory, side,
                                         NUM_SHARDS["train" if side == "train" else "test"], NUM_CLASSES,
                                         keep_order=side == "validation")
                for side, order in orders.items()}, []

    manifest, _ = shards.prepare(os.path.join(cache_dir, f"validation-{fraction:g}-seed{seed}"), source,
                                 IMAGE_SHAPE, CLASS_NAMES, write_splits)
    return manifest["splits"]


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
        raise ValueError(f"must be from 1 to {len(labels) - 1} (the sample's {len(labels)} images less one for "
                         f"the test split), got {num_train}")
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
