"""Each input pipeline (one per worker) reads its own files, and together they read every
file exactly once per epoch: in every input mode, for training and evaluation, with and
without a seed. Records carry unique ids, so the check needs no knowledge of the sharding."""
import os

import numpy as np
import pytest
import tensorflow as tf

from acquisition import fashion_mnist as fashion_data, shards
from input_fns import decode, fashion_mnist, files, image_folder, records
from acquisition.errors import InputDataError
from tests.conftest import OCT_CLASSES

PIPELINES = (2, 3)
SEEDS = (None, 7)


def contexts(pipelines):
    return [tf.distribute.InputContext(pipelines, i, pipelines) for i in range(pipelines)]


def first_epoch(ids):
    """Returns the ids before the first repeat: with shuffle-then-repeat, one whole epoch."""
    seen = []
    for i in ids:
        if i in seen:
            return seen
        seen.append(i)
    return seen


def assert_every_id_once(epochs, all_ids):
    together = [i for epoch in epochs for i in epoch]
    assert sorted(together) == sorted(all_ids), (len(together), len(all_ids))
    assert all(epochs), "a pipeline read nothing"


# The file list itself.

@pytest.mark.parametrize("pipelines", PIPELINES)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("training", (True, False))
def test_pipelines_split_the_files_between_them(tmp_path, pipelines, seed, training):
    names = [str(tmp_path / f"{i:03d}.rec") for i in range(100)]
    for name in names:
        open(name, "w").close()
    epochs = []
    for context in contexts(pipelines):
        dataset = files.pipeline_files(str(tmp_path / "*.rec"), len(names), context, training, seed)
        epochs.append([f.decode() for f in dataset.as_numpy_iterator()])
    assert_every_id_once(epochs, names)
    if training:
        shard = epochs[0]
        assert shard != sorted(shard)  # shuffled within the shard


def test_fewer_files_than_pipelines_is_an_error(tmp_path):
    for i in range(2):
        open(tmp_path / f"{i}.rec", "w").close()
    with pytest.raises(InputDataError, match="2 file.* but 3 input pipelines"):
        files.pipeline_files(str(tmp_path / "*.rec"), 2, contexts(3)[0])


# Fashion-MNIST's TFRecords.

@pytest.fixture(scope="module")
def fashion_ids(tmp_path_factory):
    """Fashion-MNIST records whose images carry their id in the first two pixels; returns (pattern, ids)."""
    data_dir = str(tmp_path_factory.mktemp("fashion-ids"))
    count = 1200
    images = np.zeros((count, 28, 28), np.uint8)
    images[:, 0, 0], images[:, 0, 1] = np.arange(count) // 256, np.arange(count) % 256
    labels = np.arange(count) % 10
    for split in ("train", "test"):
        fashion_data.write_split(data_dir, split, images, labels)
    return fashion_data.prepare_shards(data_dir)["train"]["pattern"], list(range(count))


def fashion_image_ids(input_fn, context, limit):
    ids = []
    for features, _ in input_fn(context).take(limit).as_numpy_iterator():
        pixels = np.round(features["image"][:, 0, :2, 0] * 255).astype(int)
        ids += (pixels[:, 0] * 256 + pixels[:, 1]).tolist()
    return ids


@pytest.mark.parametrize("pipelines", PIPELINES)
@pytest.mark.parametrize("seed", SEEDS)
def test_fashion_training_pipelines_read_every_record_once_per_epoch(fashion_ids, pipelines, seed):
    pattern, all_ids = fashion_ids
    input_fn = fashion_mnist.make_input_fn(pattern, 1, training=True, seed=seed)
    epochs = [first_epoch(fashion_image_ids(input_fn, c, 2 * len(all_ids) // pipelines + 100))
              for c in contexts(pipelines)]
    assert_every_id_once(epochs, all_ids)


def test_fashion_evaluation_pipelines_read_every_record_once(fashion_ids):
    pattern, all_ids = fashion_ids
    input_fn = fashion_mnist.make_input_fn(pattern, 7, training=False)
    assert_every_id_once([fashion_image_ids(input_fn, c, -1) for c in contexts(3)], all_ids)


# OCT: prepared shards, and JPEG folders with and without a cache.

@pytest.fixture(scope="module")
def oct_record_ids(tmp_path_factory):
    """16 shards of OCT-style records whose 8x8 images carry their id; returns (pattern, ids)."""
    out = str(tmp_path_factory.mktemp("oct-record-ids"))
    count = 700
    images = np.zeros((count, 8, 8, 1), np.uint8)
    images[:, 0, 0, 0], images[:, 0, 1, 0] = np.arange(count) // 256, np.arange(count) % 256
    shards.write_shards((shards.serialize_image_example(images[i], i % 4) for i in range(count)), out,
                         "train", 16)
    return shards.shard_pattern(out, "train"), list(range(count))


def record_ids(input_fn, context, limit):
    return [int(f["image"][0, 0, 0, 0]) * 256 + int(f["image"][0, 0, 1, 0])
            for f, _ in input_fn(context).take(limit).as_numpy_iterator()]


@pytest.mark.parametrize("pipelines", PIPELINES)
@pytest.mark.parametrize("seed", SEEDS)
def test_oct_record_pipelines_read_every_record_once_per_epoch(oct_record_ids, pipelines, seed):
    pattern, all_ids = oct_record_ids
    input_fn = records.make_image_records_input_fn(pattern, (8, 8, 1), 4, 1, True, "image", seed=seed)
    epochs = [first_epoch(record_ids(input_fn, c, 2 * len(all_ids) // pipelines + 100)) for c in contexts(pipelines)]
    assert_every_id_once(epochs, all_ids)


LEVELS = 16  # grey levels per 8x8 block: JPEG keeps a flat block's level exactly enough


def id_image(i):
    """Returns an 8x24 uint8 image of three flat 8x8 blocks that encode `i` (< 16**3)."""
    digits = [(i // LEVELS ** k) % LEVELS for k in range(3)]
    return np.concatenate([np.full((8, 8, 1), d * LEVELS + LEVELS // 2, np.uint8) for d in digits], axis=1)


def image_id(image):
    digits = [int(round((image[:, 8 * k:8 * k + 8].mean() - LEVELS // 2) / LEVELS)) for k in range(3)]
    return sum(d * LEVELS ** k for k, d in enumerate(digits))


@pytest.fixture(scope="module")
def jpeg_id_tree(tmp_path_factory):
    """A train/ tree of 400 small JPEGs in the four class folders, each image encoding its id."""
    root = tmp_path_factory.mktemp("jpeg-ids")
    count = 400
    for i in range(count):
        folder = root / "train" / OCT_CLASSES[i % 4]
        folder.mkdir(parents=True, exist_ok=True)
        tf.io.write_file(str(folder / f"{i:04d}.jpeg"), tf.io.encode_jpeg(id_image(i), quality=100))
    return os.path.join(str(root), "train", "*", "*.jpeg"), list(range(count))


def test_id_images_survive_jpeg(jpeg_id_tree):
    pattern, all_ids = jpeg_id_tree
    decoded = [image_id(decode.decode_and_resize(tf.io.read_file(f), (8, 24)).numpy())
               for f in sorted(tf.io.gfile.glob(pattern))]
    assert sorted(decoded) == all_ids


def jpeg_ids(input_fn, context, limit):
    return [image_id(f["image"][0]) for f, _ in input_fn(context).take(limit).as_numpy_iterator()]


@pytest.mark.parametrize("cache", [None, "", "dir"], ids=["no-cache", "memory-cache", "file-cache"])
@pytest.mark.parametrize("pipelines", PIPELINES)
@pytest.mark.parametrize("seed", SEEDS)
def test_jpeg_pipelines_read_every_file_once_per_epoch(jpeg_id_tree, tmp_path, cache, pipelines, seed):
    pattern, all_ids = jpeg_id_tree
    input_fn = image_folder.make_input_fn(image_folder.ImageFolderConfig(
        pattern, OCT_CLASSES, (8, 24), 1, training=True, seed=seed,
        cache=str(tmp_path / "cache") if cache == "dir" else cache, shuffle_buffer=50))
    epochs = [first_epoch(jpeg_ids(input_fn, c, 2 * len(all_ids) // pipelines + 100)) for c in contexts(pipelines)]
    assert_every_id_once(epochs, all_ids)
    if cache == "dir":  # each pipeline wrote a cache of its own shard
        assert len([f for f in os.listdir(tmp_path / "cache") if f.endswith(".index")]) == pipelines
