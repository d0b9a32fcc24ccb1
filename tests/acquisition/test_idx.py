import gzip
import os

import numpy as np
import pytest

from acquisition import idx
from acquisition.errors import InputDataError


def test_reads_the_real_sample(fashion_sample):
    images = idx.read_idx(os.path.join(fashion_sample, "t10k-images-idx3-ubyte.gz"), idx.IMAGES_MAGIC)
    labels = idx.read_idx(os.path.join(fashion_sample, "t10k-labels-idx1-ubyte.gz"), idx.LABELS_MAGIC)
    assert images.shape == (1000, 28, 28) and images.dtype == np.uint8
    assert labels.shape == (1000,)
    # Per-class counts as the sample's README states them.
    assert np.bincount(labels).tolist() == [108, 89, 99, 112, 114, 83, 106, 102, 96, 91]
    assert 0 < images.mean() < 255


@pytest.mark.parametrize("name", ["a.idx", "a.idx.gz"])
def test_write_then_read_gives_the_same_array(tmp_path, name):
    array = np.random.default_rng(0).integers(0, 256, (7, 5, 3), dtype=np.uint8)
    path = idx.write_idx(str(tmp_path / name), array)
    np.testing.assert_array_equal(idx.read_idx(path, 0x0803), array)


def test_wrong_magic_names_the_file(tmp_path):
    path = idx.write_idx(str(tmp_path / "labels.gz"), np.zeros(4, np.uint8))
    with pytest.raises(InputDataError, match=r"labels\.gz has IDX magic number 2049, expected 2051"):
        idx.read_idx(path, idx.IMAGES_MAGIC)


def test_truncated_file_is_reported(tmp_path):
    path = idx.write_idx(str(tmp_path / "images.gz"), np.zeros((3, 28, 28), np.uint8))
    with gzip.open(path) as f:
        data = f.read()
    with gzip.open(path, "wb") as f:
        f.write(data[:-100])
    with pytest.raises(InputDataError, match="truncated"):
        idx.read_idx(path, idx.IMAGES_MAGIC)


def test_damaged_gzip_and_missing_files_are_reported(tmp_path):
    bad = tmp_path / "images.gz"
    bad.write_bytes(b"\x1f\x8b\x08 this is not gzip data")
    with pytest.raises(InputDataError, match="cannot read"):
        idx.read_idx(str(bad), idx.IMAGES_MAGIC)
    with pytest.raises(InputDataError, match="not found"):
        idx.read_idx(str(tmp_path / "absent.gz"), idx.IMAGES_MAGIC)


@pytest.mark.parametrize("name", ["x-idx3-ubyte.gz", "x-idx3-ubyte"])
def test_a_write_that_fails_midway_leaves_the_file_there_before_and_nothing_else(tmp_path, monkeypatch, name):
    """make_fashion_sample.py wrote the IDX files in place: a stop or a full disk left them cut short."""
    path = str(tmp_path / name)
    idx.write_idx(path, np.zeros((2, 3, 3), np.uint8))
    before = open(path, "rb").read()

    def full_disk(*args):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "replace", full_disk)
    with pytest.raises(OSError):
        idx.write_idx(path, np.ones((5, 3, 3), np.uint8))
    monkeypatch.undo()
    assert os.listdir(tmp_path) == [name] and open(path, "rb").read() == before
    np.testing.assert_array_equal(idx.read_idx(path, idx.IMAGES_MAGIC), np.zeros((2, 3, 3), np.uint8))
