"""--deterministic: TensorFlow's op determinism, one seed (--seed, or 0) for every random source, and
a resumed run's input going on where its checkpoint stood.

The seed reaches the RunConfig's graph seed, tf.keras.utils.set_random_seed (Python, NumPy, TF), the
tf.data shuffles and --augment's stateless draws. The splits keep their own --split-seed (default 0),
so that runs of different seeds are tested on the same images. Op determinism also makes tf.data's
parallel maps and interleaves keep their order (their deterministic=False is overridden).

The input position: the training input is one seeded stream of examples, and step k of a run with
global batch B takes examples [k B, (k + 1) B) of it (MirroredStrategy on one machine calls the input_fn
once and hands each step's N replicas N consecutive per-replica batches). A resumed run skips the
images trained at its checkpoint (pipeline.progress), before decoding, so its batches are those of a
run that never stopped.
"""
import contextlib

import tensorflow as tf
from tensorflow.python.framework import config as tf_config  # TF 2.15 exports neither is_.. nor disable_..


@contextlib.contextmanager
def turned_on(args):
    """With `args.deterministic`, turns op determinism on (to enter before any graph is built) until
    the context ends, and gives `args` seed 0 when no --seed was given; yields whether it did."""
    if not args.deterministic:
        yield False
        return
    defaulted = args.seed is None
    if defaulted:
        args.seed = 0
    was_on = tf_config.is_op_determinism_enabled()
    tf.config.experimental.enable_op_determinism()
    try:
        yield defaulted
    finally:
        if not was_on:  # an in-process caller's later runs are its own
            tf_config.disable_op_determinism()


def header_line(setup):
    """Returns the run header's line on determinism ('' without --deterministic): the seed, where the
    input starts, and where TensorFlow makes no promise."""
    args, seed_defaulted, cluster = setup.args, setup.seed_defaulted, setup.cluster
    if not args.deterministic:
        return ""
    seed = f"seed {args.seed}" + (" (no --seed given)" if seed_defaulted else "")
    skip = setup.steps.images_at_start
    if skip:
        seed += (f", input going on after the {skip:,} images trained" if setup.data.train_input_at
                 else ", input starting anew (this input cannot skip)")
    splits = f", splits from --split-seed {args.split_seed}" if hasattr(args, "split_seed") else ""
    workers = ("; nor across workers (collectives, parameter servers): this cluster's run may differ"
               if cluster is not None else "")
    return (f"  determinism:   on, {seed}{splits}\n"
            "  not promised:  TensorFlow promises no determinism for TF1 sessions (the Estimator's); "
            f"two runs on one CPU machine are tested bitwise equal{workers}\n")


def position_input(setup):
    """With --deterministic, sets `setup`'s training input to start after the images trained at its
    start (progress.Plan.images_at_start); returns the number of examples it skips."""
    data, skip = setup.data, setup.steps.images_at_start
    if not setup.args.deterministic or not skip or data.train_input_at is None:
        return 0
    data.train_input_fn = data.train_input_at(skip)
    return skip
