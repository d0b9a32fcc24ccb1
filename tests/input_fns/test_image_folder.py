import os

import numpy as np
import pytest
import tensorflow as tf

from acquisition import image_checks

from input_fns import decode, image_folder
from acquisition.errors import InputDataError
from tests.conftest import OCT_CLASSES, make_oct_tree, odd_jpegs

SIZE = (64, 64)


def pattern(root, split="*"):
    return os.path.join(root, split, "*", "*.jpeg")


def read_all(input_fn, input_context=None):
    dataset = input_fn(input_context) if input_context else input_fn()
    images, labels = zip(*[(f["image"], l) for f, l in dataset.as_numpy_iterator()])
    return np.concatenate(images), np.concatenate(labels)


def test_evaluation_reads_every_file_once_in_order_with_its_label(oct_sample):
    p = os.path.join(oct_sample, "*", "*.jpeg")
    scan = image_checks.scan_folder(p, OCT_CLASSES)
    input_fn = image_folder.make_input_fn(image_folder.ImageFolderConfig(
        p, OCT_CLASSES, SIZE, 16, training=False))
    images, labels = read_all(input_fn)
    # uint8 grayscale: the model converts and preprocesses on the accelerator.
    assert images.shape == (129, 64, 64, 1) and images.dtype == np.uint8
    assert labels.shape == (129, 4) and labels.dtype == np.float32
    np.testing.assert_array_equal(labels.argmax(1), scan.labels)
    # Each image is the decoded file at that position: files and labels stay aligned.
    for i in (0, 64, 128):
        expected = decode.decode_and_resize(tf.io.read_file(scan.files[i]), SIZE).numpy()
        np.testing.assert_array_equal(images[i], expected)
    assert images.std() > 10


def test_reduced_scale_decode_agrees_with_full_decode_and_resize(oct_sample):
    files = sorted(tf.io.gfile.glob(os.path.join(oct_sample, "*", "*.jpeg")))
    differences = []
    for f in files:
        contents = tf.io.read_file(f)
        full = decode.decode_and_resize(contents, (224, 224), fast=False).numpy().astype(float)
        reduced = decode.decode_and_resize(contents, (224, 224), fast=True).numpy().astype(float)
        differences.append(np.abs(full - reduced).mean() / 255)
    assert np.mean(differences) < 0.02 and np.max(differences) < 0.08


def test_decode_ratio_keeps_the_target_size(oct_sample):
    contents = tf.io.read_file(os.path.join(oct_sample, "CNV", sorted(os.listdir(os.path.join(oct_sample, "CNV")))[0]))
    height, width = tf.image.extract_jpeg_shape(contents).numpy()[:2]
    for size, expected_ratio in ((224, 2), (64, 4), (32, 8), (400, 1)):
        ratio = (1, 2, 4, 8)[int(decode.decode_ratio(contents, (size, size)))]
        assert ratio == expected_ratio, (height, width, size)
        assert height // ratio >= size and width // ratio >= size


def test_training_input_shuffles_repeats_and_keeps_batches_whole(oct_tree):
    input_fn = image_folder.make_input_fn(image_folder.ImageFolderConfig(
        pattern(oct_tree, "train"), OCT_CLASSES, SIZE, 32, training=True, seed=3))
    batches = list(input_fn().take(5).as_numpy_iterator())  # 160 images: more than the 105 files
    assert all(labels.shape == (32, 4) for _, labels in batches)
    first = np.concatenate([l for _, l in batches]).argmax(1)[:32]
    assert len(set(first.tolist())) > 1  # not in folder order


def test_memory_cache_serves_later_epochs(oct_tree):
    input_fn = image_folder.make_input_fn(image_folder.ImageFolderConfig(
        pattern(oct_tree, "test"), OCT_CLASSES, SIZE, 8, training=True, cache="", seed=1))
    labels = np.concatenate([l for _, l in input_fn().take(9).as_numpy_iterator()])  # 3 epochs of 24
    assert np.bincount(labels.argmax(1), minlength=4).tolist() == [18, 18, 18, 18]


def test_each_input_pipeline_reads_its_own_files(oct_tree):
    input_fn = image_folder.make_input_fn(image_folder.ImageFolderConfig(
        pattern(oct_tree, "test"), OCT_CLASSES, SIZE, 5, training=False))
    parts = [read_all(input_fn, tf.distribute.InputContext(2, i, 2))[0] for i in range(2)]
    assert len(parts[0]) + len(parts[1]) == 24
    assert not {x.tobytes() for x in parts[0]} & {x.tobytes() for x in parts[1]}


@pytest.fixture()
def tree_with_bad_files(oct_sample, tmp_path):
    root = make_oct_tree(oct_sample, str(tmp_path / "OCT2017"))
    test_cnv = os.path.join(root, "test", "CNV")
    good = os.path.join(test_cnv, sorted(os.listdir(test_cnv))[0])
    with open(good, "rb") as f:
        data = f.read()
    with open(os.path.join(test_cnv, "truncated.jpeg"), "wb") as f:
        f.write(data[: len(data) // 2])
    tf.io.write_file(os.path.join(test_cnv, "png-in-disguise.jpeg"), tf.io.encode_png(tf.zeros((8, 8, 1), tf.uint8)))
    with open(os.path.join(test_cnv, ".DS_Store"), "wb") as f:
        f.write(b"\x00\x00\x00\x01Bud1")
    return root


def test_bad_files_fail_by_default_naming_the_file(tree_with_bad_files):
    with pytest.raises(InputDataError, match=r"png-in-disguise\.jpeg is not a JPEG file \(and 1 more bad files\); "
                                             r"remove or convert it, or pass --on-bad-image=skip"):
        image_folder.make_input_fn(image_folder.ImageFolderConfig(
            pattern(tree_with_bad_files, "test"), OCT_CLASSES, SIZE, 8, training=False))


def test_bad_files_can_be_skipped(tree_with_bad_files):
    input_fn = image_folder.make_input_fn(image_folder.ImageFolderConfig(
        pattern(tree_with_bad_files, "test"), OCT_CLASSES, SIZE, 8, training=False, on_bad_image="skip"))
    _, labels = read_all(input_fn)
    assert len(labels) == 24


def test_serving_input_gives_the_same_features_as_evaluation(oct_tree):
    files = sorted(tf.io.gfile.glob(pattern(oct_tree, "test")))[:3]
    with tf.Graph().as_default():
        receiver = decode.make_serving_input_fn(SIZE)()
        with tf.compat.v1.Session() as session:
            served = session.run(receiver.features["image"], {
                receiver.receiver_tensors["jpeg_bytes"]: [open(f, "rb").read() for f in files]})
    evaluated, _ = read_all(image_folder.make_input_fn(image_folder.ImageFolderConfig(
        pattern(oct_tree, "test"), OCT_CLASSES, SIZE, 8, training=False)))
    np.testing.assert_array_equal(served, evaluated[:3])


def test_odd_jpegs_are_skipped_and_listed_with_their_problem(oct_sample, tmp_path):
    root = make_oct_tree(oct_sample, str(tmp_path / "OCT2017"))
    normal = os.path.join(root, "test", "NORMAL")
    odd = odd_jpegs(open(os.path.join(normal, sorted(os.listdir(normal))[0]), "rb").read())
    for kind, (data, _) in odd.items():
        with open(os.path.join(normal, f"{kind}.jpeg"), "wb") as f:
            f.write(data)
    scan = image_checks.scan_folder(pattern(root, "test"), OCT_CLASSES)
    assert sorted(os.path.basename(f) for f in scan.bad_files) == sorted(f"{kind}.jpeg" for kind in odd)
    for kind, (_, message) in odd.items():
        assert scan.problems[os.path.join(normal, f"{kind}.jpeg")].startswith(message)
    input_fn = image_folder.make_input_fn(image_folder.ImageFolderConfig(
        pattern(root, "test"), OCT_CLASSES, SIZE, 8, training=False, scan=scan, on_bad_image="skip"))
    _, labels = read_all(input_fn)
    assert len(labels) == 24  # the good ones, decoded without an error


def test_a_reduced_decode_takes_png_bmp_and_gif_in_full(oct_sample, capfd):
    """An export of an OCT run with --decode reduced refused PNG, BMP and GIF files as 'Invalid JPEG data', with
    libjpeg's own 'Not a JPEG file' lines on the terminal: its decode was libjpeg's alone."""
    import io
    from PIL import Image
    path = os.path.join(oct_sample, "CNV", sorted(os.listdir(os.path.join(oct_sample, "CNV")))[0])
    with Image.open(path) as scan:
        scan = scan.convert("L")
    full = decode.decode_and_resize(tf.io.read_file(path), (64, 64), fast=False).numpy()
    for kind in ("PNG", "BMP", "GIF"):
        buffer = io.BytesIO()
        scan.save(buffer, kind)
        fast = decode.decode_and_resize(tf.constant(buffer.getvalue()), (64, 64), fast=True).numpy()
        assert fast.shape == (64, 64, 1) and np.abs(fast.astype(float) - full).mean() < 2, kind
    assert "Not a JPEG file" not in capfd.readouterr().err
