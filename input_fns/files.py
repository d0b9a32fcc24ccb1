"""The file list an input pipeline reads (matched, sharded between pipelines, shuffled).

Every input mode starts here, in the order tensorflow/models uses: list the
files in a fixed (sorted) order, take this pipeline's shard, then shuffle within
the shard. Shuffling first would let each worker draw its own order, so that
workers read overlapping files and leave others unread.
"""

import tensorflow as tf

from acquisition.errors import InputDataError


def num_pipelines(input_context):
    """Returns how many input pipelines share the files (1 without an input_context)."""
    return input_context.num_input_pipelines if input_context is not None else 1


def pipeline_id(input_context):
    """Returns this input pipeline's index among num_pipelines(input_context)."""
    return input_context.input_pipeline_id if input_context is not None else 0


def pipeline_files(file_pattern, num_files, input_context=None, training=True, seed=None,
                   reshuffle_each_epoch=True, exclude=()):
    """Returns the dataset of file names this input pipeline reads, once (no repeat).

    `list_files` in sorted order, minus `exclude`, then every n-th file from
    this pipeline's index (n = the number of pipelines), so that the pipelines
    together read each of the `num_files` files exactly once per epoch. For
    training the shard is then shuffled as a whole, anew each epoch or, with
    `reshuffle_each_epoch=False`, once (for a cache that fixes the first order).
    Raises InputDataError when there are fewer files than pipelines.
    """
    pipelines = num_pipelines(input_context)
    if num_files < pipelines:
        raise InputDataError(
            f"{num_files} file(s) match {file_pattern} but {pipelines} input pipelines (workers) read them: "
            "each worker needs files of its own; use fewer workers or split the data into more files")
    files = tf.data.Dataset.list_files(file_pattern, shuffle=False)
    if exclude:
        excluded = tf.constant(list(exclude))

        @tf.autograph.experimental.do_not_convert
        def kept(path):
            return tf.reduce_all(tf.not_equal(path, excluded))
        files = files.filter(kept)
    if pipelines > 1:
        files = files.shard(pipelines, pipeline_id(input_context))
    if training:
        files = files.shuffle(num_files // pipelines + 1, seed=seed, reshuffle_each_iteration=reshuffle_each_epoch)
    return files


def skip_examples(dataset, examples, input_context=None):
    """Returns `dataset` (a training stream, repeated) without its first examples: this pipeline's share
    of the `examples` all pipelines together have already consumed (all of them with one pipeline)."""
    share = examples // num_pipelines(input_context)
    return dataset.skip(share) if share else dataset
