"""Turns a compiled Keras model into an Estimator configured for a DistributionPlan."""
import re

import tensorflow as tf


def build_run_config(model_dir, plan, checkpoint_steps, summary_steps, log_steps,
                     keep_checkpoints=5, seed=None):
    """Returns the RunConfig: the plan's strategy for training, checkpoint and summary cadence.

    Evaluation runs on one device (eval_distribute=None): a mirrored evaluation
    splits the last, partial batches between replicas and can drop some of
    them, and every test example must be counted exactly once.
    """
    return tf.estimator.RunConfig(
        model_dir=model_dir,
        tf_random_seed=seed,
        save_checkpoints_steps=checkpoint_steps,
        save_summary_steps=summary_steps,
        log_step_count_steps=log_steps,
        keep_checkpoint_max=keep_checkpoints,
        train_distribute=plan.strategy,
        eval_distribute=None)


def build_estimator(keras_model, run_config):
    """Returns the Estimator made from `keras_model` by model_to_estimator.

    A model dir without a checkpoint starts from the Keras model's current
    weights; one with a checkpoint resumes from it. model_to_estimator's model_fn
    saves through a Saver of its own that keeps 5 checkpoints whatever the
    RunConfig says; its model_fn is wrapped here so that keep_checkpoint_max holds.
    """
    estimator = tf.keras.estimator.model_to_estimator(keras_model=keras_model, config=run_config)
    keras_model_fn, keep = estimator._model_fn, run_config.keep_checkpoint_max

    def model_fn(features, labels, mode):
        spec = keras_model_fn(features, labels, mode)
        if spec.scaffold is not None and spec.scaffold.saver is not None:
            spec.scaffold.saver._max_to_keep = keep
            spec.scaffold.saver.saver_def.max_to_keep = keep
        return spec

    estimator._model_fn = model_fn  # TF 2.15, the last Estimator release: private, but frozen
    return estimator


def latest_global_step(model_dir):
    """Returns the global step of the newest checkpoint in `model_dir`, or 0 if there is none."""
    checkpoint = tf.train.latest_checkpoint(model_dir)
    match = re.search(r"-(\d+)$", checkpoint or "")
    return int(match.group(1)) if match else 0
