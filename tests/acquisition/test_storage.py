"""File helpers over tf.io.gfile: the same calls on a local path and on a URL (ram:// here)."""
import errno
import os

import pytest

from acquisition import storage
from tests.conftest import small_file_system


@pytest.mark.parametrize("root", ["local", "ram://storage-test"])
def test_atomic_writes_listing_copies_and_removal_work_alike(root, tmp_path):
    root = str(tmp_path) if root == "local" else root
    folder = storage.join(root, "a", "b")
    storage.makedirs(folder)
    path = storage.write_atomically(storage.join(folder, "x.json"), '{"n": 1}\n')
    storage.write_atomically(path, b'{"n": 2}\n')  # replaced whole
    assert storage.read_text(path) == '{"n": 2}\n' and storage.listdir(folder) == ["x.json"]  # no temporary left
    assert storage.isfile(path) and storage.isdir(folder) and not storage.isfile(folder)
    with pytest.raises(FileNotFoundError):
        storage.read_bytes(storage.join(folder, "none"))
    copy = storage.copy_tree(storage.join(root, "a"), storage.join(root, "copy"))
    assert storage.read_text(storage.join(copy, "b", "x.json")) == '{"n": 2}\n'
    storage.remove_tree(storage.join(root, "a"))
    assert not storage.exists(path) and storage.absolute(copy) == (copy if "://" in copy else os.path.abspath(copy))


def test_a_tree_is_copied_with_the_marker_last(tmp_path, monkeypatch):
    for name in ("z_last_by_name", "marker", "sub/variables.index"):
        os.makedirs(os.path.dirname(tmp_path / "src" / name), exist_ok=True)
        (tmp_path / "src" / name).write_text(name)
    copied = []
    real = storage.copy_file
    monkeypatch.setattr(storage, "copy_file", lambda s, t: (copied.append(t), real(s, t)))
    storage.copy_tree(str(tmp_path / "src"), "ram://marker-test/export", last="marker")
    assert copied[-1] == "ram://marker-test/export/marker" and len(copied) == 3


def test_a_url_failure_names_the_bucket_and_the_cause():
    message = ("Error executing an HTTP request: libcurl code 6 meaning 'Couldn't resolve host name', error details: "
               "Could not resolve host: www.googleapis.com\n\t when reading metadata of gs://my-bucket/run1")
    assert storage.url_failure("gs://my-bucket/run1/x", message) == (
        "gs://my-bucket cannot be reached or written (Could not resolve host: www.googleapis.com: no network, or no DNS)")


def test_an_op_error_s_line_is_its_cause_in_graph_and_in_eager_messages():
    import tensorflow as tf
    graph = ("Graph execution error:\n\nDetected at node 'decode_image/DecodeImage' defined at (most recent call "
             "last):\n  File \"train.py\", line 1\nNode: 'decode_image/DecodeImage'\nInvalid PNG data, size 301\n"
             "\t [[{{node decode_image/DecodeImage}}]]")
    eager = ("Graph execution error:\n\nDetected at node decode_image/DecodeImage defined at (most recent call last):\n"
             "<stack traces unavailable>\nInvalid PNG data, size 301\n\t [[{{node decode_image/DecodeImage}}]] "
             "[Op:__inference_pruned_1473]")  # a SavedModel's signature called eagerly (predict.py)
    op = ("{{function_node __wrapped__DecodeImage_device_/job:localhost/replica:0/task:0/device:CPU:0}} Invalid PNG "
          "data, size 301 [Op:DecodeImage] name: ")  # an eager op's (a .tflite file's decoding, in predict.py)
    for message in (graph, eager, op):
        assert storage.op_error_line(tf.errors.InvalidArgumentError(None, None, message)) == "Invalid PNG data, size 301"


def test_a_copy_onto_a_full_disk_names_the_file_it_was_writing(tmp_path):
    """shutil's in-kernel copy named the source: a full disk under the best model's copy named the checkpoint it
    copied, not the file left cut short."""
    source = tmp_path / "model.ckpt-3.data-00000-of-00001"
    source.write_bytes(os.urandom(1 << 20))
    with small_file_system(tmp_path / "small", 64 << 10) as small:
        target = small / "model.ckpt-3.data-00000-of-00001.tmp"
        with pytest.raises(OSError) as raised:
            storage.copy_file(str(source), str(target))
    assert raised.value.errno == errno.ENOSPC
    assert raised.value.filename == str(target) and raised.value.filename2 == str(source)
