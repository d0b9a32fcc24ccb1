"""Every training input mode mixes the classes as the dataset does from the first batch,
on data of the real size and class order: OCT2017's 83,484 class-sorted scans (37,205 CNV
first, far more than any shuffle buffer) and a class-sorted Fashion-MNIST of 60,000."""
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from acquisition import retinal_oct
from acquisition.fashion_mnist import prepare_shards
from acquisition import image_checks
from input_fns import fashion_mnist, image_folder, records
from acquisition.errors import InputDataError
from pipeline.tasks import oct_job
from tests.conftest import OCT2017_TRAIN_COUNTS, OCT_CLASSES, ROOT

BATCHES, BATCH_SIZE, SIZE = 100, 32, (32, 32)


def class_counts_per_batch(input_fn, num_classes):
    """Returns an int array [batch, class] over the first BATCHES training batches."""
    return np.array([np.bincount(labels.argmax(1), minlength=num_classes)
                     for _, labels in input_fn().take(BATCHES).as_numpy_iterator()])


def assert_mixed_like(counts, expected, tolerance=0.04):
    """Every class in about the dataset's share (3,200 images: 3 sigma is under 0.03), and
    no batch of a single class."""
    assert counts.shape[0] == BATCHES
    share, expected = counts.sum(0) / counts.sum(), np.asarray(expected) / np.sum(expected)
    assert np.abs(share - expected).max() < tolerance, (share.round(3), expected.round(3))
    assert (counts.max(1) < counts.sum(1)).all(), "a batch of one class"


@pytest.fixture(scope="module")
def train_scan(full_oct_tree):
    """image_checks' scan of the full-size tree's training folders (83,484 files: scanned once here)."""
    return image_checks.scan_folder(retinal_oct.split_pattern(full_oct_tree, "train"), OCT_CLASSES)


def test_the_full_size_tree_has_the_real_class_mix(train_scan):
    assert train_scan.class_counts() == OCT2017_TRAIN_COUNTS and not train_scan.problems


@pytest.mark.parametrize("cache", [None, "", "dir"], ids=["jpeg", "memory-cache", "file-cache"])
def test_jpeg_modes_mix_classes_from_the_first_batch(full_oct_tree, train_scan, tmp_path, cache):
    input_fn = image_folder.make_input_fn(image_folder.ImageFolderConfig(
        retinal_oct.split_pattern(full_oct_tree, "train"), OCT_CLASSES, SIZE, BATCH_SIZE, training=True,
        scan=train_scan, cache=str(tmp_path) if cache == "dir" else cache))
    assert_mixed_like(class_counts_per_batch(input_fn, 4), list(OCT2017_TRAIN_COUNTS.values()))


CACHE_WRITER = """
import os, signal, sys
sys.path.insert(0, {root!r})
from input_fns import image_folder
from tests.conftest import OCT_CLASSES
input_fn = image_folder.make_input_fn(image_folder.ImageFolderConfig({pattern!r}, OCT_CLASSES, {size!r}, 32, training=True, cache={cache!r}))
iterator = iter(input_fn())
next(iterator)
print("writing", flush=True)
{then}
"""


def start_cache_writer(pattern, cache, then):
    code = CACHE_WRITER.format(root=ROOT, pattern=pattern, size=SIZE, cache=cache, then=then)
    process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline() == "writing\n"
    return process


def test_a_file_cache_killed_in_its_first_epoch_is_rebuilt_and_a_live_writer_is_named(full_oct_tree, train_scan,
                                                                                      tmp_path):
    pattern, cache = retinal_oct.split_pattern(full_oct_tree, "train"), str(tmp_path)
    writer = start_cache_writer(pattern, cache, "import time; time.sleep(60)")
    with pytest.raises(InputDataError, match=rf"pid {writer.pid} on .* is writing the cache .*pass another --cache"):
        image_folder.make_input_fn(image_folder.ImageFolderConfig(
            pattern, OCT_CLASSES, SIZE, BATCH_SIZE, training=True, scan=train_scan, cache=cache))()
    writer.send_signal(signal.SIGKILL)  # killed during its first epoch: tf.data's lockfile stays behind
    writer.wait()
    assert any(f.endswith(".lockfile") for f in os.listdir(cache))
    input_fn = image_folder.make_input_fn(image_folder.ImageFolderConfig(
        pattern, OCT_CLASSES, SIZE, BATCH_SIZE, training=True, scan=train_scan, cache=cache))
    assert_mixed_like(class_counts_per_batch(input_fn, 4), list(OCT2017_TRAIN_COUNTS.values()))


def test_prepared_shards_mix_classes_from_the_first_batch(full_oct_records):
    manifest = oct_job.read_records_manifest(full_oct_records)
    train = manifest["splits"]["train"]
    assert train["class_counts"] == list(OCT2017_TRAIN_COUNTS.values())
    input_fn = records.make_image_records_input_fn(train["pattern"], SIZE + (1,), 4, BATCH_SIZE, True, "image")
    assert_mixed_like(class_counts_per_batch(input_fn, 4), train["class_counts"])


def test_fashion_records_mix_classes_from_the_first_batch(full_fashion_data_dir):
    splits = prepare_shards(full_fashion_data_dir)
    assert splits["train"]["count"] == 60000
    input_fn = fashion_mnist.make_input_fn(splits["train"]["pattern"], BATCH_SIZE, training=True)
    assert_mixed_like(class_counts_per_batch(input_fn, 10), splits["train"]["class_counts"])
