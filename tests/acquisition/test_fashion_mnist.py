import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from acquisition import fashion_mnist, idx
from acquisition.errors import DownloadError, InputDataError


def test_load_split_validates_counts_size_and_labels(tmp_path):
    fashion_mnist.write_split(str(tmp_path), "train", np.zeros((4, 28, 28)), np.arange(3))
    with pytest.raises(InputDataError, match="holds 4 images but .* holds 3 labels"):
        fashion_mnist.load_split(str(tmp_path), "train")
    fashion_mnist.write_split(str(tmp_path), "train", np.zeros((2, 32, 32)), np.arange(2))
    with pytest.raises(InputDataError, match="32x32 images"):
        fashion_mnist.load_split(str(tmp_path), "train")
    fashion_mnist.write_split(str(tmp_path), "train", np.zeros((2, 28, 28)), np.array([1, 12]))
    with pytest.raises(InputDataError, match="label 12"):
        fashion_mnist.load_split(str(tmp_path), "train")


@pytest.mark.parametrize("slash", ["/", ""])  # a folder's URL with its slash or without (--download-url's help)
def test_download_fetches_only_missing_files(fashion_data_dir, tmp_path, slash):
    target = tmp_path / "cache"
    target.mkdir()
    shutil.copy(os.path.join(fashion_data_dir, "t10k-images-idx3-ubyte.gz"), target)
    fetched = fashion_mnist.download(str(target), base_url=f"file://{fashion_data_dir}{slash}")
    assert sorted(fetched) == ["t10k-labels-idx1-ubyte.gz", "train-images-idx3-ubyte.gz",
                               "train-labels-idx1-ubyte.gz"]
    assert fashion_mnist.missing_files(str(target)) == []
    assert sorted(os.listdir(target)) == sorted([fashion_mnist.DOWNLOAD_LOCK] + [n for p in fashion_mnist.FILES.values()
                                                                                 for n in p])


def test_offline_download_is_a_clear_error_and_leaves_nothing_behind(tmp_path):
    # Port 9 (discard) on loopback refuses the connection at once, like a machine offline.
    made, kept, partial = tmp_path / "new" / "fashion", tmp_path / "kept", tmp_path / "partial"
    kept.mkdir()
    partial.mkdir()
    (partial / "t10k-labels-idx1-ubyte.gz").write_bytes(b"the user's")
    for data_dir in (made, kept, partial):
        with pytest.raises(DownloadError, match=r"not in .* and downloading http://127\.0\.0\.1:9/"):
            fashion_mnist.download(str(data_dir), base_url="http://127.0.0.1:9/", timeout=5)
    assert not made.exists() and os.listdir(kept) == []  # a folder the user made stays, empty
    assert os.listdir(partial) == ["t10k-labels-idx1-ubyte.gz"]  # its download lock stayed, before


def test_tfrecords_hold_exactly_the_idx_bytes(fashion_data_dir, tmp_path):
    splits = fashion_mnist.prepare_shards(fashion_data_dir, str(tmp_path / "records"))
    assert splits["train"]["count"] == 800 and splits["test"]["count"] == 200
    images, labels = fashion_mnist.load_split(fashion_data_dir, "test")
    expected = {(img.tobytes(), int(lab)) for img, lab in zip(images, labels)}
    spec = {"image": tf.io.FixedLenFeature([], tf.string), "label": tf.io.FixedLenFeature([], tf.int64)}
    found = []
    for record in tf.data.TFRecordDataset(tf.io.gfile.glob(splits["test"]["pattern"])):
        parsed = tf.io.parse_single_example(record, spec)
        found.append((parsed["image"].numpy(), int(parsed["label"])))
    assert len(found) == 200 and set(found) == expected
    assert len(tf.io.gfile.glob(splits["train"]["pattern"])) == fashion_mnist.NUM_SHARDS["train"]


def test_tfrecord_cache_is_reused_then_rebuilt_when_the_idx_files_change(fashion_data_dir, tmp_path):
    data_dir = tmp_path / "data"
    shutil.copytree(fashion_data_dir, data_dir)
    cache = str(tmp_path / "records")
    first = fashion_mnist.prepare_shards(str(data_dir), cache)
    shard = tf.io.gfile.glob(first["test"]["pattern"])[0]
    built_at = os.stat(shard).st_mtime_ns
    assert fashion_mnist.prepare_shards(str(data_dir), cache) == first
    assert os.stat(shard).st_mtime_ns == built_at
    images, labels = fashion_mnist.load_split(str(data_dir), "test")
    fashion_mnist.write_split(str(data_dir), "test", images[:50], labels[:50])
    assert fashion_mnist.prepare_shards(str(data_dir), cache)["test"]["count"] == 50


def test_write_split_writes_the_official_names(tmp_path):
    paths = fashion_mnist.write_split(str(tmp_path), "test", np.ones((2, 28, 28)), [3, 4])
    assert [os.path.basename(p) for p in paths] == list(fashion_mnist.FILES["test"])
    np.testing.assert_array_equal(idx.read_idx(paths[1], idx.LABELS_MAGIC), [3, 4])


def test_two_processes_downloading_at_once_fetch_each_file_once(fashion_data_dir, tmp_path):
    # A loopback server that takes a second per file, so both downloads overlap.
    import http.server
    import subprocess
    import sys
    import threading
    import time
    from tests.conftest import ROOT

    served = []

    class Slow(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=fashion_data_dir, **kwargs)

        def do_GET(self):
            served.append(self.path)
            time.sleep(1.0)
            super().do_GET()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    code = (f"import sys; sys.path.insert(0, {ROOT!r}); from acquisition import fashion_mnist; "
            f"print(len(fashion_mnist.download({str(tmp_path)!r}, base_url={url!r})))")
    try:
        processes = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
                     for _ in range(2)]
        fetched = sorted(int(p.communicate(timeout=120)[0]) for p in processes)
    finally:
        server.shutdown()
    assert fetched == [0, 4]  # one process fetched the four files, the other waited and found them
    assert len(served) == 4
    for split in ("train", "test"):
        assert len(fashion_mnist.load_split(str(tmp_path), split)[1]) == (800 if split == "train" else 200)
