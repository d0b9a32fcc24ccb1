import os

import tensorflow as tf

from input_fns import records


def test_write_shards_spreads_records_and_leaves_no_temporary_files(tmp_path):
    paths = records.write_shards((f"r{i}".encode() for i in range(10)), str(tmp_path), "part", 3)
    assert [os.path.basename(p) for p in paths] == [
        "part-00000-of-00003.tfrecord", "part-00001-of-00003.tfrecord", "part-00002-of-00003.tfrecord"]
    assert sorted(os.listdir(tmp_path)) == sorted(os.path.basename(p) for p in paths)
    counts = [sum(1 for _ in tf.data.TFRecordDataset(p)) for p in paths]
    assert counts == [4, 3, 3]
    assert sorted(tf.io.gfile.glob(records.shard_pattern(str(tmp_path), "part"))) == paths


def test_a_killed_conversions_temporary_folder_is_removed_by_the_next(tmp_path):
    import os
    from input_fns import records
    (tmp_path / ".train-abc123").mkdir()  # what write_shards leaves when killed midway
    (tmp_path / ".train-abc123" / "train-00000-of-00002.tfrecord").write_bytes(b"half")
    (tmp_path / ".hidden-user-folder").mkdir()
    assert records.remove_partial_shards(str(tmp_path)) == [str(tmp_path / ".train-abc123")]
    assert sorted(os.listdir(tmp_path)) == [".hidden-user-folder"]
