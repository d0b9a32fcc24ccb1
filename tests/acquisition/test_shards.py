import json
import os

import numpy as np
import pytest
import tensorflow as tf

from acquisition import shards
from acquisition.errors import InputDataError


def test_write_shards_spreads_records_and_leaves_no_temporary_files(tmp_path):
    paths = shards.write_shards((f"r{i}".encode() for i in range(10)), str(tmp_path), "part", 3)
    assert [os.path.basename(p) for p in paths] == [
        "part-00000-of-00003.tfrecord", "part-00001-of-00003.tfrecord", "part-00002-of-00003.tfrecord"]
    assert sorted(os.listdir(tmp_path)) == sorted(os.path.basename(p) for p in paths)
    counts = [sum(1 for _ in tf.data.TFRecordDataset(p)) for p in paths]
    assert counts == [4, 3, 3]
    assert sorted(tf.io.gfile.glob(shards.shard_pattern(str(tmp_path), "part"))) == paths


def test_a_killed_conversions_temporary_folder_is_removed_by_the_next(tmp_path):
    (tmp_path / ".partial-validation-abc123").mkdir()  # what write_shards leaves when killed midway
    (tmp_path / ".partial-validation-abc123" / "validation-00000-of-00002.tfrecord").write_bytes(b"half")
    (tmp_path / ".hidden-user-folder").mkdir()
    assert shards.remove_partial_shards(str(tmp_path)) == [str(tmp_path / ".partial-validation-abc123")]
    assert sorted(os.listdir(tmp_path)) == [".hidden-user-folder"]


def _prepare(directory, source, calls):
    def write_splits(out):
        calls.append(out)
        images = [np.full((2, 2, 1), i, np.uint8) for i in range(5)]
        return {"test": shards.write_split(images, [0, 1, 1, 0, 1], out, "test", 2, 2, keep_order=True)}, ["bad.png"]
    return shards.prepare(directory, source, (2, 2, 1), ("a", "b"), write_splits)


def test_prepare_writes_one_manifest_reuses_it_for_the_same_source_and_rebuilds_for_another(tmp_path, caplog):
    out, calls = str(tmp_path / "shards"), []
    manifest, reused = _prepare(out, {"files": "v1"}, calls)
    assert not reused and len(calls) == 1
    entry = manifest["splits"]["test"]
    assert entry["count"] == 5 and entry["class_counts"] == [2, 3] and entry["num_shards"] == 2
    assert entry["labels_in_order"] == [0, 1, 1, 1, 0]  # shard 0 holds records 0, 2, 4; shard 1 holds 1, 3
    assert manifest["skipped_files"] == ["bad.png"] and manifest["version"] == shards.VERSION
    assert sorted(tf.io.gfile.glob(entry["pattern"])) == shards.shard_paths(out, "test", 2)
    assert _prepare(out, {"files": "v1"}, calls) == (manifest, True) and len(calls) == 1
    assert "replacing" not in caplog.text  # (none there before)
    assert not _prepare(out, {"files": "v2", "image_size": 48}, calls)[1] and len(calls) == 2
    assert (f"replacing the shards in {out}, made from other data or settings (the files they hold changed; "
            "image_size None -> 48)") in caplog.text
    assert not _prepare(out, {"files": "v2"}, calls)[1] and len(calls) == 3
    os.remove(shards.shard_paths(out, "test", 2)[1])  # a shard gone: made again
    assert not _prepare(out, {"files": "v2"}, calls)[1] and len(calls) == 4


def test_a_shard_cut_short_is_named_when_read_and_made_again_when_prepared(tmp_path):
    out, calls = str(tmp_path / "shards"), []
    manifest, _ = _prepare(out, {"files": "v1"}, calls)
    shard = shards.shard_paths(out, "test", 2)[0]
    whole = os.path.getsize(shard)
    assert manifest["splits"]["test"]["shard_bytes"][0] == whole
    with open(shard, "r+b") as f:
        f.truncate(whole - 7)
    with pytest.raises(InputDataError, match=rf"test-00000-of-00002.tfrecord holds {whole - 7} bytes, {whole} when it "
                                             r"was written \(cut short or damaged\); make them again$"):
        shards.read_manifest(out, "make them again", splits=("test",))
    assert not _prepare(out, {"files": "v1"}, calls)[1] and len(calls) == 2  # not reused as it was
    assert os.path.getsize(shard) == whole
    assert sum(1 for _ in tf.data.TFRecordDataset(shards.shard_paths(out, "test", 2))) == 5


@pytest.mark.parametrize("manifest, message", [
    ({"counts": {}}, "written in class order by an earlier version"),
    ({"version": 2, "splits": {}}, "manifest version 2, this one reads 3"),
    ({"version": 3, "image_shape": [2, 2, 1], "splits": {}}, "lacks source, class_names, splits.test"),
    ({"version": 3, "source": {}, "image_shape": [2, 2, 1], "class_names": ["a"],
      "splits": {"test": {"count": 1, "class_counts": [1], "num_shards": 1}}}, "test-00000-of-00001.tfrecord, listed"),
])
def test_a_manifest_that_cannot_be_read_is_one_line_with_the_advice(tmp_path, manifest, message):
    (tmp_path / shards.MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(InputDataError, match=message) as error:
        shards.read_manifest(str(tmp_path), "make them again", splits=("test",))
    assert str(error.value).endswith("; make them again") and "\n" not in str(error.value)


def test_shards_on_a_url_are_read_as_local_ones(tmp_path):
    from acquisition import storage
    out = str(tmp_path / "shards")
    local, _ = _prepare(out, {"files": "v1"}, [])
    storage.copy_tree(out, "ram://shared/shards")  # as they would sit in a bucket
    manifest = shards.read_manifest("ram://shared/shards", "make them again", splits=("test",))
    assert manifest["splits"]["test"]["count"] == local["splits"]["test"]["count"] == 5
    files = sorted(tf.io.gfile.glob(manifest["splits"]["test"]["pattern"]))
    assert files == shards.shard_paths("ram://shared/shards", "test", 2)
    assert sum(1 for _ in tf.data.TFRecordDataset(files)) == 5
    storage.remove(files[1])
    with pytest.raises(InputDataError, match="test-00001-of-00002.tfrecord, listed in ram://shared/shards/manifest"):
        shards.read_manifest("ram://shared/shards", "make them again", splits=("test",))


READER = ("import sys, time; sys.path.insert(0, {root!r}); from acquisition import shards\n"
          "try:\n    shards.hold_for_reading({out!r})\nexcept Exception as e:\n    print(e, flush=True); sys.exit(1)\n"
          "print('reading', flush=True); time.sleep(60)")


def test_shards_a_run_reads_are_not_rewritten_under_it_nor_read_while_written(tmp_path):
    """prepare_oct.py into the folder a run trained from replaced its shards; the run died with a traceback."""
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out, calls = str(tmp_path / "shards"), []
    _prepare(out, {"files": "v1"}, calls)
    reader = subprocess.Popen([sys.executable, "-c", READER.format(root=root, out=out)], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert reader.stdout.readline() == "reading\n"
        assert _prepare(out, {"files": "v1"}, calls)[1]  # the same shards: reused beside the reader
        with pytest.raises(InputDataError, match=r"a run is training from the shards in .*shards, and these settings "
                                                 "would write them anew; wait until it has finished"):
            _prepare(out, {"files": "v2"}, calls)
        assert len(calls) == 1
    finally:
        reader.kill()
        reader.wait()

    def write_while_a_run_starts(directory):
        started = subprocess.run([sys.executable, "-c", READER.format(root=root, out=directory)],
                                 capture_output=True, text=True, timeout=60)
        calls.append(started.stdout)
        return {"test": shards.write_split([np.zeros((2, 2, 1), np.uint8)], [0], directory, "test", 1, 2,
                                           keep_order=True)}, []
    assert not shards.prepare(out, {"files": "v2"}, (2, 2, 1), ("a", "b"), write_while_a_run_starts)[1]
    assert calls[-1].startswith(f"the shards in {out} are being written; wait until")
