"""The one input over image files: a list of files and their labels (a split made by
class_folders, or the files of a pattern's scan, see image_folder).

The pipeline: the (file, label) pairs in list order -> this input pipeline's shard (every n-th
pair) -> for training, shuffled as a whole (and without a cache, repeated) -> parallel map (read,
decode any of JPEG, PNG, BMP, GIF, resize) -> optional cache (for training shuffled and repeated
after it) -> batch -> one-hot labels -> prefetch. A training input's first `skip` examples are left
out before decoding (after the cache: its first epoch is decoded anyway, to fill it).
Images stay uint8: float conversion and preprocessing belong to the model.
"""
import dataclasses
from typing import Optional, Sequence, Tuple

import tensorflow as tf

from acquisition.errors import InputDataError
from input_fns import FEATURE_KEY
from input_fns.cache import prepare_cache_file
from input_fns.decode import decode_and_resize
from input_fns.files import num_pipelines, pipeline_id, skip_examples

AUTOTUNE = tf.data.AUTOTUNE


@dataclasses.dataclass(frozen=True)
class ImageListConfig:
    """What an image-list input reads and how it batches it."""
    files: Sequence[str]
    labels: Sequence[int]  # class index of each file
    num_classes: int
    image_size: Tuple[int, int]  # (height, width) every image is resized to
    channels: int  # 1 or 3: what each image is decoded to
    batch_size: int  # per input pipeline (per replica)
    training: bool  # shuffle, repeat and drop the last partial batch
    feature_key: str = FEATURE_KEY
    seed: Optional[int] = None
    fast_decode: bool = False  # let libjpeg decode at 1/2-1/8 scale when that still covers image_size
    # Keep the decoded, resized images of the first epoch for later ones: None not at all, '' in memory,
    # a folder for files named by `cache_key` (what else decides their content, e.g. the files' sizes and
    # times) with this pipeline's shard, the size, channels and decode mode (see cache.prepare_cache_file).
    cache: Optional[str] = None
    cache_key: Optional[dict] = None
    shuffle_buffer: int = 2048  # with a cache: images shuffled anew each epoch after it
    file_key: Optional[str] = None  # evaluation: also yield each image's path under this feature
    skip: int = 0  # training: examples of the stream already trained (a resumed deterministic run's position)


def make_input_fn(config):
    """Returns an Estimator input_fn(input_context=None) yielding ({feature_key: uint8 [batch, h, w,
    channels]}, one-hot float32 labels) over `config`'s files.

    Training input is the shard's files shuffled as a whole (anew each epoch, or once before a cache,
    whose images are then shuffled in a buffer of `shuffle_buffer` each epoch): classes mix as in the
    dataset from the first batch. Evaluation input yields each file once, in list order. With several
    input pipelines each reads every n-th file from its own index; raises InputDataError when there
    are fewer files than pipelines.
    """
    c = config
    if len(c.files) != len(c.labels):
        raise ValueError(f"{len(c.files)} files but {len(c.labels)} labels")

    def input_fn(input_context=None):
        pipelines = num_pipelines(input_context)
        if len(c.files) < pipelines:
            raise InputDataError(f"{len(c.files)} image(s) for {pipelines} input pipelines (workers); "
                                 "each needs images of its own")
        pairs = tf.data.Dataset.from_tensor_slices((list(c.files), list(c.labels)))
        if pipelines > 1:
            pairs = pairs.shard(pipelines, pipeline_id(input_context))
        if c.training:
            pairs = pairs.shuffle(len(c.files) // pipelines + 1, seed=c.seed, reshuffle_each_iteration=c.cache is None)
        with_paths = c.file_key is not None and not c.training

        @tf.autograph.experimental.do_not_convert
        def load(path, label):
            image = decode_and_resize(tf.io.read_file(path), c.image_size, c.channels, c.fast_decode)
            return (image, path) if with_paths else image, label

        @tf.autograph.experimental.do_not_convert
        def finish(images, labels):  # on whole batches: fewer, larger ops
            features = {c.feature_key: images[0], c.file_key: images[1]} if with_paths else {c.feature_key: images}
            return features, tf.one_hot(labels, c.num_classes)

        if c.training and c.cache is None:
            pairs = skip_examples(pairs.repeat(), c.skip, input_context)
        images = pairs.map(load, num_parallel_calls=AUTOTUNE, deterministic=not c.training)
        if c.cache is not None:
            images = images.cache(c.cache and prepare_cache_file(c.cache, "images", {
                **(c.cache_key or {}), "shard": [pipeline_id(input_context), pipelines],
                "image_size": list(c.image_size), "channels": c.channels,
                "decode": "reduced" if c.fast_decode else "full", "training": c.training,
                # a training cache holds its files in the order --seed shuffled them before it
                "order_seed": c.seed if c.training else None}))
            if c.training:
                images = skip_examples(images.shuffle(c.shuffle_buffer, seed=c.seed).repeat(), c.skip, input_context)
        batches = images.batch(c.batch_size, drop_remainder=c.training)
        return batches.map(finish, num_parallel_calls=AUTOTUNE).prefetch(AUTOTUNE)

    return input_fn


def decoded_images(files, image_size, channels, fast_decode=False):
    """Returns an iterator of the `files` decoded and resized as the training input decodes them
    (uint8 [h, w, channels] NumPy arrays, in list order): what image shards are written from."""
    @tf.autograph.experimental.do_not_convert
    def load(path):
        return decode_and_resize(tf.io.read_file(path), image_size, channels, fast_decode)

    dataset = tf.data.Dataset.from_tensor_slices(list(files)).map(load, num_parallel_calls=AUTOTUNE)
    dataset = dataset.batch(256).prefetch(2)  # batches: less per-image overhead
    return (image for batch in dataset.as_numpy_iterator() for image in batch)
