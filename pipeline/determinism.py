"""--deterministic: TensorFlow's op determinism, one seed (--seed, or 0) for every random source, and
a resumed run's input going on where its checkpoint stood.

The seed reaches the RunConfig's graph seed, tf.keras.utils.set_random_seed (Python, NumPy, TF), the
tf.data shuffles and --augment's stateless draws. The splits keep their own --split-seed (default 0),
so that runs of different seeds are tested on the same images. Op determinism also makes tf.data's
parallel maps and interleaves keep their order (their deterministic=False is overridden).

The input position: the training input is one seeded stream of examples, and step k of a run with
global batch B takes examples [k B, (k + 1) B) of it (MirroredStrategy on one machine calls the input_fn
once and hands each step's N replicas N consecutive per-replica batches). A resumed run skips the
images trained at its checkpoint (pipeline.training_record), before decoding, so its batches are those of a
run that never stopped.
"""
import contextlib
import dataclasses

import tensorflow as tf
from tensorflow.python.framework import config as tf_config  # TF 2.15 exports neither is_.. nor disable_..

from models.dropout import stream_dropout_layers
from pipeline.errors import FlagError


@contextlib.contextmanager
def turned_on(settings):
    """With `settings.deterministic`, turns op determinism on (to enter before any graph is built)
    until the context ends; yields None. (The seed, 0 without --seed, is fixed in the settings.)"""
    if not settings.deterministic:
        yield
        return
    was_on = tf_config.is_op_determinism_enabled()
    tf.config.experimental.enable_op_determinism()
    try:
        yield
    finally:
        if not was_on:  # an in-process caller's later runs are its own
            tf_config.disable_op_determinism()


def header_line(setup):
    """Returns the run header's line on determinism ('' without --deterministic): the seed, where the
    input starts, and where TensorFlow makes no promise."""
    settings = setup.settings
    if not settings.deterministic:
        return ""
    seed = f"seed {settings.seed}" + (" (no --seed given)" if settings.seed_defaulted else "")
    skip = setup.steps.images_at_start
    if skip:
        seed += (f", input going on after the {skip:,} images trained" if setup.data.train_input_at
                 else ", input starting anew (this input cannot skip)")
    splits = f", splits from --split-seed {settings.split_seed}" if hasattr(settings, "split_seed") else ""
    workers = ("; nor across workers (collectives, parameter servers): this cluster's run may differ"
               if setup.cluster is not None else "")
    return (f"  determinism:   on, {seed}{splits}\n"
            "  not promised:  TensorFlow promises no determinism for TF1 sessions (the Estimator's); "
            f"two runs on one CPU machine are tested bitwise equal{workers}\n")


def check_resumable(settings, start_step, keras_model):
    """Raises FlagError (exit 2) when a --deterministic run would resume a model whose dropout draws from a
    stream that starts over in each process (models.dropout.stream_dropout_layers): it could not repeat a
    straight run."""
    if not settings.deterministic or not start_step:
        return
    layers = stream_dropout_layers(keras_model)
    if layers:
        raise FlagError(f"--deterministic: {keras_model.name}'s dropout layers ({', '.join(layers[:3])}"
                        f"{', ...' if len(layers) > 3 else ''}) draw from a random stream that starts over in each "
                        f"process, so a resume from step {start_step} cannot repeat a run that never stopped; "
                        "resume without --deterministic, or train it again in one go")


def positioned_input(settings, data, images_at_start):
    """Returns `data` (TaskData) whose training input starts after the `images_at_start` a resumed
    --deterministic run has trained (itself otherwise, or when its input cannot skip)."""
    if not settings.deterministic or not images_at_start or data.train_input_at is None:
        return data
    return dataclasses.replace(data, train_input_fn=data.train_input_at(images_at_start))
