"""The file-pattern input_fn over sharded TFRecord files (written by acquisition.shards).

The input_fn follows the tf.data performance guide: list_files -> interleave
the readers -> shuffle -> repeat -> batch -> parallel map -> prefetch. The map
parses whole batches of records at once ("vectorized mapping"), which costs far
less CPU per image than parsing records one by one.
"""
import tensorflow as tf

from acquisition.shards import IMAGE_EXAMPLE_SPEC
from acquisition.image_checks import matching_files
from input_fns.decode import scale_to_unit
from input_fns.files import pipeline_files, skip_examples

AUTOTUNE = tf.data.AUTOTUNE


def parse_image_examples(serialized, image_shape):
    """Returns (uint8 images [batch, *image_shape], int64 labels [batch]) from a batch of
    records written by acquisition.shards.serialize_image_example."""
    parsed = tf.io.parse_example(serialized, IMAGE_EXAMPLE_SPEC)
    images = tf.reshape(tf.io.decode_raw(parsed["image"], tf.uint8), (-1,) + tuple(image_shape))
    return images, parsed["label"]


def make_image_records_input_fn(file_pattern, image_shape, num_classes, batch_size, training,
                                feature_key, seed=None, scale=False, cache_in_memory=False, skip=0):
    """Returns an Estimator input_fn over image shards written by acquisition.shards: batches of
    ({feature_key: images [batch, *image_shape]}, one-hot float32 labels [batch, num_classes]).

    The images stay uint8 (the model scales them), or become float32 in [0, 1] with `scale`.
    """
    def parse(serialized):  # a batch of records
        images, labels = parse_image_examples(serialized, image_shape)
        if scale:
            images = scale_to_unit(images)
        return {feature_key: images}, tf.one_hot(labels, num_classes, dtype=tf.float32)

    return make_record_input_fn(file_pattern, parse, batch_size, training, seed=seed,
                                cache_in_memory=cache_in_memory, skip=skip)


def make_record_input_fn(file_pattern, parse_batch_fn, batch_size, training,
                         shuffle_buffer=5000, seed=None, cache_in_memory=False, skip=0):
    """Returns an Estimator input_fn(input_context=None) over the TFRecords matching `file_pattern`.

    `parse_batch_fn` maps a batch (a vector) of serialized records to batched
    (features, labels). Each input pipeline reads its own shard of the files
    (see files.pipeline_files). Training input reads its files in an order
    shuffled each epoch, interleaved four at a time, shuffles records in a
    buffer of `shuffle_buffer`, repeats forever and drops the last partial batch
    (an uneven last batch stalls MirroredStrategy); the shards are written in a
    shuffled order, so classes mix from the first batch. Evaluation input is
    read once, in file order, keeping the last partial batch. `batch_size` is
    the batch one replica takes per step. Training input can start `skip` examples into its
    stream (a resumed deterministic run's position), skipped as records, before parsing.
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
            dataset = skip_examples(dataset.shuffle(shuffle_buffer, seed=seed).repeat(), skip, input_context)
        dataset = dataset.batch(batch_size, drop_remainder=training)
        dataset = dataset.map(tf.autograph.experimental.do_not_convert(parse_batch_fn), num_parallel_calls=AUTOTUNE)
        return dataset.prefetch(AUTOTUNE)

    return input_fn
