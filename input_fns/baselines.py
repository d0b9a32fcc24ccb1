"""The design write-up's input recipes and a bare decode loop: the baselines a task's benchmark
input variants measure its pipelines against.

They are kept as the write-up describes them (TF 1 era idioms included) so that
the project's pipelines are measured against them, not used for training.
"""
import os

import tensorflow as tf

from input_fns import FEATURE_KEY, decode


def design_image_input_fn(file_pattern, class_names, image_size, batch_size, buffer_size=2048,
                          feature_key=FEATURE_KEY):
    """Returns the write-up's OCT input_fn: list_files -> shuffle_and_repeat -> map_and_batch
    (read, full-size 3-channel decode_jpeg, convert to [0, 1], resize_images) -> prefetch."""
    num_classes = len(class_names)

    def input_fn(input_context=None):
        table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(tf.constant(class_names), tf.range(num_classes)), -1)

        def parse(filename):
            label = table.lookup(tf.strings.split(filename, os.sep)[-2])
            image = tf.io.decode_jpeg(tf.io.read_file(filename), channels=3)
            image = tf.image.convert_image_dtype(image, tf.float32)
            image = tf.compat.v1.image.resize_images(image, image_size)
            return {feature_key: image}, tf.one_hot(label, num_classes)

        dataset = tf.data.Dataset.list_files(file_pattern, shuffle=True)
        dataset = dataset.apply(tf.data.experimental.shuffle_and_repeat(buffer_size))
        dataset = dataset.apply(tf.data.experimental.map_and_batch(
            parse, batch_size, num_parallel_calls=os.cpu_count()))
        return dataset.prefetch(tf.data.AUTOTUNE)

    return input_fn


def design_array_input_fn(images, labels, batch_size, feature_key=FEATURE_KEY):
    """Returns the write-up's Fashion-MNIST input_fn: numpy arrays -> from_tensor_slices ->
    shuffle(5000) -> repeat -> batch -> prefetch(2). `images` are float32 in [0, 1]."""
    def input_fn(input_context=None):
        dataset = tf.data.Dataset.from_tensor_slices(({feature_key: images}, labels))
        return dataset.shuffle(5000).repeat().batch(batch_size).prefetch(2)

    return input_fn


def bare_decode_input_fn(file_pattern, image_size, batch_size):
    """Returns an input_fn that only reads, decodes and resizes (grayscale), in parallel:
    about the most this machine can decode, the limit for any image pipeline."""
    @tf.autograph.experimental.do_not_convert
    def load(path):
        return decode.decode_and_resize(tf.io.read_file(path), image_size)

    def input_fn(input_context=None):
        files = tf.data.Dataset.list_files(file_pattern, shuffle=False).repeat()
        images = files.map(load, num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)
        return images.batch(batch_size).prefetch(tf.data.AUTOTUNE)

    return input_fn
