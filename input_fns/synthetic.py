"""Generated data with the shapes of a real dataset, for smoke runs and benchmarks.

One batch is generated once and repeated, as in tensorflow/models and
tf_cnn_benchmarks, so that the input costs next to nothing.
"""
import tensorflow as tf

from input_fns import FEATURE_KEY


def make_input_fn(image_shape, num_classes, batch_size, training, feature_key=FEATURE_KEY,
                  num_examples=None, seed=0, dtype=tf.float32):
    """Returns an Estimator input_fn(input_context=None) yielding random images and one-hot labels.

    Images are float32 in [0, 1], or uint8 in [0, 255] with dtype=tf.uint8.
    Training input repeats forever; evaluation input yields exactly `num_examples`
    examples (default one batch), the last batch short if need be, then ends: the
    count a TaskData states, which a mirrored evaluation splits between its replicas.
    """
    def input_fn(input_context=None):
        del input_context  # every pipeline yields the same generated batch
        images = tf.random.stateless_uniform((batch_size,) + tuple(image_shape), seed=(seed, 1))
        if dtype == tf.uint8:
            images = tf.cast(images * 255.0, tf.uint8)
        classes = tf.random.stateless_uniform((batch_size,), seed=(seed, 2), maxval=num_classes,
                                              dtype=tf.int32)
        labels = tf.one_hot(classes, num_classes, dtype=tf.float32)
        dataset = tf.data.Dataset.from_tensors(({feature_key: images}, labels)).cache()
        if training:
            dataset = dataset.repeat()
        else:
            count = num_examples or batch_size
            dataset = dataset.repeat(-(-count // batch_size)).unbatch().take(count).batch(batch_size)
        return dataset.prefetch(tf.data.AUTOTUNE)

    return input_fn
