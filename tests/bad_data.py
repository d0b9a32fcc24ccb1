"""Damaged and odd data for tests/scripts/test_bad_inputs.py: each maker copies a shipped sample into
a test's tmp folder and spoils it one way, returning the --data-dir."""
import gzip
import json
import os
import shutil

from acquisition import fashion_mnist
from tests.conftest import make_oct_tree


# --- Fashion-MNIST data makers: each returns a --data-dir ---------------------------------------

def fashion_copy(fashion_data_dir, tmp_path):
    target = tmp_path / "fashion"
    shutil.copytree(fashion_data_dir, target)
    return target


def idx_with_wrong_magic(fashion_data_dir, tmp_path):
    target = fashion_copy(fashion_data_dir, tmp_path)
    shutil.copy(target / "train-labels-idx1-ubyte.gz", target / "train-images-idx3-ubyte.gz")
    return target


def idx_with_mismatched_counts(fashion_data_dir, tmp_path):
    target = fashion_copy(fashion_data_dir, tmp_path)
    images, labels = fashion_mnist.load_split(str(target), "train")
    fashion_mnist.write_split(str(target), "train", images, labels[:-5])
    return target


def idx_truncated(fashion_data_dir, tmp_path):
    target = fashion_copy(fashion_data_dir, tmp_path)
    path = target / "t10k-images-idx3-ubyte.gz"
    data = gzip.open(path).read()
    with gzip.open(path, "wb") as f:
        f.write(data[: len(data) // 2])
    return target


def data_dir_is_a_file(fashion_data_dir, tmp_path):
    path = tmp_path / "not-a-folder"
    path.write_text("")
    return path


# --- OCT trees: each returns a --data-dir holding OCT2017/ ---------------------------------------

def oct_copy(oct_sample, tmp_path):
    make_oct_tree(oct_sample, str(tmp_path / "oct" / "OCT2017"))
    return tmp_path / "oct"


def oct_unknown_class(oct_sample, tmp_path):
    data = oct_copy(oct_sample, tmp_path)
    shutil.copytree(data / "OCT2017" / "train" / "CNV", data / "OCT2017" / "train" / "GLAUCOMA")
    return data


def oct_empty_class(oct_sample, tmp_path):
    data = oct_copy(oct_sample, tmp_path)
    shutil.rmtree(data / "OCT2017" / "test" / "DME")
    (data / "OCT2017" / "test" / "DME").mkdir()
    return data


def oct_no_images(oct_sample, tmp_path):
    data = oct_copy(oct_sample, tmp_path)
    for folder in (data / "OCT2017" / "train").iterdir():
        for f in folder.iterdir():
            f.unlink()
    return data


def oct_and_records_manifest(manifest):
    """Returns a maker of {tmp}/records holding `manifest`; the run is given no --data-dir (None), which
    --records-dir refuses."""
    def make(oct_sample, tmp_path):
        (tmp_path / "records").mkdir()
        (tmp_path / "records" / "manifest.json").write_text(json.dumps(manifest))
    return make


def oct_only_val(oct_sample, tmp_path):
    data = oct_copy(oct_sample, tmp_path)
    os.rename(data / "OCT2017" / "train", data / "OCT2017" / "val")
    shutil.rmtree(data / "OCT2017" / "test")
    return data


def oct_with(name, content):
    def make(oct_sample, tmp_path):
        data = oct_copy(oct_sample, tmp_path)
        folder = data / "OCT2017" / "train" / "DRUSEN"
        good = (folder / sorted(os.listdir(folder))[0]).read_bytes()
        (folder / name).write_bytes(content(good))
        return data
    return make
