"""The one shard-and-manifest system: image examples as sharded TFRecords, and the manifest.json
beside them that says what they hold.

Every job's prepared records go through `prepare` (Fashion-MNIST's conversion of its IDX files,
the OCT job's resized scans): one record format, one manifest schema and VERSION, one lock
(LOCK, in the shard folder) and one reuse rule: shards are reused while the manifest's version
and `source` (what they were made from, and how) are those asked for and every shard is there at
the size it was written; otherwise they are made anew. A manifest lists, for each split, its record
count, examples per class, shard count and each shard's bytes; for evaluation splits also the labels
in the order an evaluation reads them.
"""
import contextlib
import hashlib
import json
import logging
import os
import shutil
import tempfile

import numpy as np
import tensorflow as tf

from acquisition import locks, storage
from acquisition.errors import InputDataError
from acquisition.files import write_json_atomically

# 2: training records in shuffled order; 3: one manifest schema for every job (splits, class names).
VERSION = 3
log = logging.getLogger(__name__)
MANIFEST = "manifest.json"
LOCK = ".shards.lock"
READERS = ".readers.lock"  # held shared by each run reading the shards: none is rewritten under it
_reading = {}  # shard folder -> its READERS hold, kept until this process ends
IMAGE_EXAMPLE_SPEC = {"image": tf.io.FixedLenFeature([], tf.string),
                      "label": tf.io.FixedLenFeature([], tf.int64)}
_PARTIAL = ".partial-"  # the start of write_shards' temporary folders
_KEYS = ("source", "image_shape", "class_names", "splits")
_SPLIT_KEYS = ("count", "class_counts", "num_shards")


def serialize_image_example(image, label):
    """Returns a uint8 image array and its class index as a serialized tf.train.Example."""
    feature = {
        "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[image.tobytes()])),
        "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)])),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def shuffled_order(count, seed):
    """Returns a permutation of range(count) drawn from `seed`: the order training records are written in."""
    return np.random.default_rng(seed).permutation(count)


def shard_paths(directory, prefix, num_shards):
    """Returns the shard file names `<prefix>-00000-of-0000N.tfrecord` in `directory`."""
    return [os.path.join(directory, f"{prefix}-{i:05d}-of-{num_shards:05d}.tfrecord")
            for i in range(num_shards)]


def shard_pattern(directory, prefix):
    """Returns the file pattern that matches every shard written with `prefix`."""
    return os.path.join(directory, f"{prefix}-*-of-*.tfrecord")


def remove_partial_shards(directory):
    """Removes the temporary folders (`.partial-<prefix>-*`) that write_shards calls killed midway
    left in `directory`, whatever their split; returns them. Call it holding the directory's LOCK."""
    names = os.listdir(directory) if os.path.isdir(directory) else []
    leftovers = [os.path.join(directory, d) for d in names
                 if d.startswith(_PARTIAL) and os.path.isdir(os.path.join(directory, d))]
    for path in leftovers:
        shutil.rmtree(path, ignore_errors=True)
    return leftovers


def write_shards(serialized_records, directory, prefix, num_shards):
    """Writes records round-robin into `num_shards` TFRecord files; returns their paths.

    Records keep the order they come in within each shard: a training split
    should come in shuffled order (see shuffled_order), or its shards run
    through the classes one after the other.

    The shards are written under temporary names and renamed only when all are
    complete, so an interrupted conversion never leaves shards that look whole;
    shards of the same prefix from an earlier conversion are replaced.
    """
    os.makedirs(directory, exist_ok=True)
    tmp_dir = tempfile.mkdtemp(prefix=f"{_PARTIAL}{prefix}-", dir=directory)
    try:
        tmp_paths = shard_paths(tmp_dir, prefix, num_shards)
        writers = [tf.io.TFRecordWriter(p) for p in tmp_paths]
        try:
            for i, record in enumerate(serialized_records):
                writers[i % num_shards].write(record)
        finally:
            for w in writers:
                w.close()
        final_paths = shard_paths(directory, prefix, num_shards)
        for old in set(tf.io.gfile.glob(shard_pattern(directory, prefix))) - set(final_paths):
            os.remove(old)  # shards of an earlier conversion with another shard count
        for tmp, final in zip(tmp_paths, final_paths):
            os.replace(tmp, final)
        return final_paths
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)


def write_split(images, labels, directory, split, num_shards, num_classes, keep_order=False):
    """Writes `images` (uint8 arrays, an iterable) with their class indices `labels` (a sequence, in
    the same order) as the shards of `split`; returns the split's manifest entry. With `keep_order`
    the entry lists the labels in the order an evaluation reads them (shard 0, then 1, ...)."""
    paths = write_shards((serialize_image_example(image, label) for image, label in zip(images, labels)),
                         directory, split, num_shards)
    labels = [int(label) for label in labels]
    entry = {"count": len(labels), "num_shards": num_shards,
             "class_counts": np.bincount(np.asarray(labels, np.int64), minlength=num_classes).tolist(),
             "shard_bytes": [os.path.getsize(path) for path in paths]}
    if keep_order:
        entry["labels_in_order"] = [label for s in range(num_shards) for label in labels[s::num_shards]]
    return entry


def fingerprint(paths):
    """Returns a short digest of the files' names, sizes and modification times: what a source's
    shards were made from, changed when any file is added, removed, replaced or touched."""
    digest = hashlib.sha1()
    for path in sorted(paths):
        stat = os.stat(path)
        digest.update(f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return f"{len(paths)} files, sha1 {digest.hexdigest()}"


def prepare(directory, source, image_shape, class_names, write_splits):
    """Returns (the manifest of the shards in `directory`, whether they were reused).

    Reuses the shards when their manifest has this VERSION, this `source` (a JSON-able dict: what
    they are made from and how) and every shard is present at the size it was written. Otherwise calls `write_splits(directory)`,
    which writes each split with write_split and returns ({split: entry}, skipped files), and writes
    the manifest. One process at a time prepares a folder; the others wait and reuse its shards.
    """
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise InputDataError(f"the shard folder {directory} is a file; pass a folder")
    source = json.loads(json.dumps(source))  # as it reads back: tuples become lists
    manifest = _reusable(directory, source)
    if manifest:
        return manifest, True
    os.makedirs(directory, exist_ok=True)
    with locks.exclusive(os.path.join(directory, LOCK)):
        manifest = _reusable(directory, source)
        if manifest:
            return manifest, True
        _say_what_is_replaced(directory, source)
        with _unread(directory):
            remove_partial_shards(directory)  # of a preparation that was killed: we hold the lock
            splits, skipped = write_splits(directory)
            manifest = {"version": VERSION, "source": source, "image_shape": list(image_shape),
                        "class_names": list(class_names), "splits": splits, "skipped_files": list(skipped)}
            write_json_atomically(os.path.join(directory, MANIFEST), manifest)
        return _with_patterns(manifest, directory), False


def hold_for_reading(directory):
    """Marks the local shard folder `directory` as read by this process until it ends: prepare() then
    refuses to rewrite it (a run whose shards changed under it failed mid-training). Raises
    InputDataError while a preparation rewrites it."""
    if storage.is_url(directory) or directory in _reading or not os.path.isdir(directory):
        return  # (a folder that is not there: reading its manifest says so)
    try:
        _reading[directory] = locks.share(os.path.join(directory, READERS))
    except locks.LockHeld:
        raise InputDataError(f"the shards in {directory} are being written; wait until scripts/prepare_oct.py "
                             "has finished, then run again") from None


@contextlib.contextmanager
def _unread(directory):
    """Holds the shards in `directory` from readers while the block writes them; raises InputDataError
    when a run reads them (see hold_for_reading)."""
    try:
        fd = locks.acquire(os.path.join(directory, READERS))
    except locks.LockHeld:
        raise InputDataError(f"a run is training from the shards in {directory}, and these settings would "
                             "write them anew; wait until it has finished, or pass another output folder") from None
    try:
        yield
    finally:
        locks.release(fd)


def _say_what_is_replaced(directory, source):
    """Logs one line naming what differs when `directory` holds whole shards made from another `source` (their
    data changed, or another --image-size): they are about to be replaced."""
    try:
        earlier = read_manifest(directory, advice="")["source"]
    except InputDataError:
        return
    differ = [f"{key} {earlier.get(key)!r} -> {source.get(key)!r}" if key != "files" else "the files they hold changed"
              for key in sorted(set(earlier) | set(source)) if earlier.get(key) != source.get(key)]
    log.warning("replacing the shards in %s, made from other data or settings (%s)", directory, "; ".join(differ))


def _reusable(directory, source):
    try:
        manifest = read_manifest(directory, advice="")
    except InputDataError:
        return None
    return manifest if manifest["source"] == source else None


def read_manifest(directory, advice, splits=()):
    """Returns the manifest of the shards in `directory`, each split given its file `pattern`.

    Raises InputDataError, ending with `advice` (how to make the shards again), when the
    manifest is missing, damaged, from another version, incomplete (`splits` names the splits
    it must have), or a shard is gone or not of the size it was written.
    """
    required = splits
    path = storage.join(directory, MANIFEST)
    try:
        manifest = json.loads(storage.read_text(path))
    except (OSError, ValueError) as e:
        raise InputDataError(f"cannot read {path} ({getattr(e, 'strerror', None) or e}); {advice}") from None
    version = manifest.get("version", 1) if isinstance(manifest, dict) else 1
    if version < 2:
        raise InputDataError(f"the shards in {directory} were written in class order by an earlier version, "
                             f"so training would see one class at a time; {advice}")
    if version != VERSION:
        raise InputDataError(f"the shards in {directory} were written by another version of the project "
                             f"(manifest version {version}, this one reads {VERSION}); {advice}")
    missing = [k for k in _KEYS if k not in manifest]
    splits = manifest.get("splits") if isinstance(manifest.get("splits"), dict) else {}
    missing += [f"splits.{s}" for s in required if "splits" in manifest and s not in splits]
    missing += [f"splits.{s}.{k}" for s, entry in splits.items() for k in _SPLIT_KEYS if k not in entry]
    if missing:
        raise InputDataError(f"{path} lacks {', '.join(missing)}; {advice}")
    for split, entry in splits.items():
        paths = shard_paths(directory, split, entry["num_shards"])
        absent = [p for p in paths if not storage.isfile(p)]
        if absent:
            raise InputDataError(f"{absent[0]}, listed in {path}, is missing; {advice}")
        # (manifests written before the sizes were recorded have none to check)
        for shard, written in zip(paths, entry.get("shard_bytes", ())):
            if storage.size(shard) != written:
                raise InputDataError(f"{shard} holds {storage.size(shard)} bytes, {written} when it was written "
                                     f"(cut short or damaged); {advice}")
    return _with_patterns(manifest, directory)


def _with_patterns(manifest, directory):
    for split, entry in manifest["splits"].items():
        entry["pattern"] = shard_pattern(directory, split)
    return manifest
