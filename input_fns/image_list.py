"""Input functions over a list of image files and their labels (a split made by class_folders).

The pipeline: the (file, label) pairs in list order -> this input pipeline's
shard -> for training, shuffled as a whole each epoch and repeated -> parallel
map (read, decode any of JPEG, PNG, BMP, GIF, resize) -> batch -> one-hot labels
-> prefetch. Images stay uint8: float conversion and preprocessing belong to the
model.
"""
import dataclasses
from typing import Optional, Sequence, Tuple

import tensorflow as tf

from acquisition.errors import InputDataError
from input_fns import FEATURE_KEY
from input_fns.files import num_pipelines, pipeline_id
from input_fns.image_folder import decode_and_resize

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


def make_input_fn(config):
    """Returns an Estimator input_fn(input_context=None) yielding ({feature_key: uint8 [batch, h, w,
    channels]}, one-hot float32 labels) over `config`'s files.

    Evaluation input yields each file once, in list order. With several input
    pipelines each reads every n-th file from its own index; raises
    InputDataError when there are fewer files than pipelines.
    """
    if len(config.files) != len(config.labels):
        raise ValueError(f"{len(config.files)} files but {len(config.labels)} labels")

    def input_fn(input_context=None):
        pipelines = num_pipelines(input_context)
        if len(config.files) < pipelines:
            raise InputDataError(f"{len(config.files)} image(s) for {pipelines} input pipelines (workers); "
                                 "each needs images of its own")
        pairs = tf.data.Dataset.from_tensor_slices((list(config.files), list(config.labels)))
        if pipelines > 1:
            pairs = pairs.shard(pipelines, pipeline_id(input_context))
        if config.training:
            pairs = pairs.shuffle(len(config.files) // pipelines + 1, seed=config.seed,
                                  reshuffle_each_iteration=True).repeat()

        def load(path, label):
            return decode_and_resize(tf.io.read_file(path), config.image_size, config.channels), label

        def finish(images, labels):  # on whole batches: fewer, larger ops
            return {config.feature_key: images}, tf.one_hot(labels, config.num_classes)

        images = pairs.map(load, num_parallel_calls=AUTOTUNE, deterministic=not config.training)
        batches = images.batch(config.batch_size, drop_remainder=config.training)
        return batches.map(finish, num_parallel_calls=AUTOTUNE).prefetch(AUTOTUNE)

    return input_fn


def decoded_images(files, image_size, channels, fast_decode=False):
    """Returns an iterator of the `files` decoded and resized as the training input decodes them
    (uint8 [h, w, channels] NumPy arrays, in list order): what image shards are written from."""
    dataset = tf.data.Dataset.from_tensor_slices(list(files)).map(
        lambda path: decode_and_resize(tf.io.read_file(path), image_size, channels, fast_decode),
        num_parallel_calls=AUTOTUNE).batch(256).prefetch(2)  # batches: less per-image overhead
    return (image for batch in dataset.as_numpy_iterator() for image in batch)
