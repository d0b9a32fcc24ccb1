"""Sharded TFRecord files and the file-pattern input_fn that reads them.

The input_fn follows the tf.data performance guide: list_files -> interleave
the readers -> shuffle -> repeat -> batch -> parallel map -> prefetch. The map
parses whole batches of records at once ("vectorized mapping"), which costs far
less CPU per image than parsing records one by one.
"""
import os
import shutil
import tempfile

import numpy as np
import tensorflow as tf

from input_fns.files import matching_files, pipeline_files

AUTOTUNE = tf.data.AUTOTUNE


IMAGE_EXAMPLE_SPEC = {"image": tf.io.FixedLenFeature([], tf.string),
                      "label": tf.io.FixedLenFeature([], tf.int64)}


def serialize_image_example(image, label):
    """Returns a uint8 image array and its class index as a serialized tf.train.Example."""
    feature = {
        "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[image.tobytes()])),
        "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)])),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def parse_image_examples(serialized, image_shape):
    """Returns (uint8 images [batch, *image_shape], int64 labels [batch]) from a batch of
    records written by serialize_image_example."""
    parsed = tf.io.parse_example(serialized, IMAGE_EXAMPLE_SPEC)
    images = tf.reshape(tf.io.decode_raw(parsed["image"], tf.uint8), (-1,) + tuple(image_shape))
    return images, parsed["label"]


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


def remove_partial_shards(directory, prefixes=("train", "test")):
    """Removes the temporary folders (`.<prefix>-*`) that write_shards calls killed midway left
    in `directory`; returns them. Call it holding the directory's conversion lock."""
    names = os.listdir(directory) if os.path.isdir(directory) else []
    leftovers = [os.path.join(directory, d) for d in names if any(d.startswith(f".{p}-") for p in prefixes)
                 and os.path.isdir(os.path.join(directory, d))]
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
    tmp_dir = tempfile.mkdtemp(prefix=f".{prefix}-", dir=directory)
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


def make_record_input_fn(file_pattern, parse_batch_fn, batch_size, training,
                         shuffle_buffer=5000, seed=None, cache_in_memory=False):
    """Returns an Estimator input_fn(input_context=None) over the TFRecords matching `file_pattern`.

    `parse_batch_fn` maps a batch (a vector) of serialized records to batched
    (features, labels). Each input pipeline reads its own shard of the files
    (see files.pipeline_files). Training input reads its files in an order
    shuffled each epoch, interleaved four at a time, shuffles records in a
    buffer of `shuffle_buffer`, repeats forever and drops the last partial batch
    (an uneven last batch stalls MirroredStrategy); the shards are written in a
    shuffled order, so classes mix from the first batch. Evaluation input is
    read once, in file order, keeping the last partial batch. `batch_size` is
    the batch one replica takes per step.
    """
    num_files = len(matching_files(file_pattern))  # fail before the Estimator starts, not inside its graph

    def input_fn(input_context=None):
        files = pipeline_files(file_pattern, num_files, input_context, training, seed,
                               reshuffle_each_epoch=not cache_in_memory)
        dataset = files.interleave(
            tf.data.TFRecordDataset,
            cycle_length=4 if training else 1,
            num_parallel_calls=AUTOTUNE,
            deterministic=not training)
        if cache_in_memory:
            dataset = dataset.cache()
        if training:
            dataset = dataset.shuffle(shuffle_buffer, seed=seed).repeat()
        dataset = dataset.batch(batch_size, drop_remainder=training)
        dataset = dataset.map(parse_batch_fn, num_parallel_calls=AUTOTUNE)
        return dataset.prefetch(AUTOTUNE)

    return input_fn
