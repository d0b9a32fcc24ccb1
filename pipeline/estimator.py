"""Turns a compiled Keras model into an Estimator configured for a DistributionPlan: build_estimator,
the one way a run (or a benchmark) gets its Estimator, and the pieces it is made of."""
import functools
import hashlib
import json
import re

import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import rewriter_config_pb2
from tensorflow.python.util import tf_decorator  # TF 2.15's, frozen: what tf_inspect reads signatures through

from acquisition import storage
from hooks.checkpoint_saver import CadenceCheckpointSaverHook, CheckpointCadence
from hooks.scores import add_scores_to_collection
from hooks.stop import add_stop_agreement
from input_fns import FILE_KEY, augmentation, mixing as mixing_lib
from models import GRAPH_REWRITE_PRECISIONS
from pipeline.batching import batch_sizes_for_replicas
from pipeline.evaluation_report import EVAL_ONLY_DIR
from pipeline import conv_gradients, determinism, ema as ema_lib, initial_weights, mfu as mfu_lib, \
    model_dir as model_dir_lib
from pipeline.mixing import mixing_of
from pipeline.metrics import CROSS_ENTROPY, mean_cross_entropy, per_class_metric_ops
from pipeline.validation.best import index_digest
from serving.export import with_class_names


def build_estimator(setup, pacing=None, figures=True, probe_peak=True, saves_when_due=False, trains=True):
    """Returns (the Estimator of `setup`'s model, (its FLOPs per image, the devices' peak)), the
    model checked to fit the model dir's checkpoint; without `figures`, (the Estimator, None) and
    no MFU header lines (the benchmark's time to accuracy). With a validation `pacing` (a
    pipeline.validation.cadence.Pacing), checkpoints come for its evaluations. Without `probe_peak` an
    unknown peak is not probed (a cluster's workers leave it to the chief). With `saves_when_due` (one
    machine), checkpoints come every --checkpoint-steps global steps counted from step 0 and at each
    step an evaluation will start at (hooks.checkpoint_saver, Pacing.checkpoint_due); otherwise every
    --checkpoint-steps, at most the cadence's interval, counted from the step training started at.
    Without `trains` (an evaluation) a --deterministic model dir is not checked to resume repeatably."""
    settings = setup.settings
    if settings.seed is not None:
        tf.keras.utils.set_random_seed(settings.seed)
    checkpoints = None
    if saves_when_due:
        checkpoints = CheckpointCadence(settings.checkpoint_steps, pacing.checkpoint_due if pacing else None)
        checkpoint_steps = settings.checkpoint_steps
    else:  # each evaluation needs a checkpoint at or after its step
        checkpoint_steps = pacing.cadence.checkpoint_steps(setup.global_batch, settings.checkpoint_steps) \
            if pacing else settings.checkpoint_steps
    config = build_run_config(
        settings.model_dir, setup.plan, checkpoint_steps, settings.summary_steps, settings.keep_checkpoints,
        settings.seed, session_config(settings.xla, settings.intra_op_threads, settings.inter_op_threads,
                                      settings.precision),
        setup.mirrored_evaluation)
    keras_model = setup.task.build_model(settings, setup.schedule)
    if setup.initial_weights:  # a new model dir: model_to_estimator's first checkpoint holds them
        initial_weights.load(keras_model, setup.initial_weights, settings, setup.task.name)
    run_figures = None
    if figures:
        run_figures = mfu_lib.run_figures(keras_model, settings.precision, setup.plan.devices, probe=probe_peak)
        print(mfu_lib.header_lines(*run_figures), flush=True)
    model_dir_lib.check_fits(settings.model_dir, keras_model)
    if trains:  # (an evaluation draws no dropout: any model dir evaluates)
        determinism.check_resumable(settings, setup.start_step, keras_model)
    estimator = estimator_from_keras(keras_model, config, setup.data.class_names, settings.augment,
                                     settings.seed or 0, mixing=mixing_of(settings), ema=settings.ema,
                                     checkpoints=checkpoints,
                                     conv_gradients_by_matmul=settings.conv_gradients == "matmul",
                                     weights_from=functools.partial(weights_sources, settings, setup.initial_weights))
    if settings.eval_only:  # its evaluations' TensorBoard events beside its report, not among the training run's
        estimator.eval_dir = _eval_only_dirs(settings.model_dir)
    return estimator, run_figures


def _eval_only_dirs(model_dir):
    """Returns an Estimator.eval_dir for an --eval-only run of `model_dir`: each evaluation's summaries in
    EVAL_ONLY_DIR (eval/, or eval_<name>/ as the Estimator names them), not in the training run's eval/."""
    def eval_dir(name=None):
        return storage.join(model_dir, EVAL_ONLY_DIR, f"eval_{name}" if name else "eval")
    return eval_dir


def weights_sources(settings, initial):
    """Returns what besides the model decides a new model dir's first weights (see weights_origin): --init-from's
    checkpoint and --weights, each with a digest of its contents (a source run redone in place to the same
    step, or a weights file replaced, is another origin), and --seed."""
    weights = getattr(settings, "weights", None)
    weights_file = weights not in (None, "imagenet", "none") and storage.exists(weights)
    return {"init_from": initial.checkpoint if initial else None,
            "init_from_digest": index_digest(initial.checkpoint) if initial else None,
            "weights": weights,
            "weights_digest": storage.sha256(weights) if weights_file else None,
            "seed": settings.seed}


def session_config(xla=False, intra_op_threads=0, inter_op_threads=0, precision="fp32"):
    """Returns the ConfigProto of the Estimator's sessions, or None for the Estimator's default.

    It starts from that default (soft placement, one meta-optimizer pass); `xla`
    turns on XLA auto-clustering of the whole graph (global_jit_level ON_1; on a
    CPU it also needs TF_XLA_FLAGS=--tf_xla_cpu_global_jit before TensorFlow is
    imported, which pipeline.cli sets); thread counts of 0 leave TensorFlow's choice;
    precision 'bf16-amp' turns on the oneDNN bfloat16 rewrite (a session's config is the
    only place an Estimator reads it: tf.config.optimizer's options are not).
    """
    rewrite = precision in GRAPH_REWRITE_PRECISIONS
    if not (xla or intra_op_threads or inter_op_threads or rewrite):
        return None
    config = tf.compat.v1.ConfigProto(allow_soft_placement=True)  # as the Estimator's default
    config.graph_options.rewrite_options.meta_optimizer_iterations = rewriter_config_pb2.RewriterConfig.ONE
    config.intra_op_parallelism_threads = intra_op_threads
    config.inter_op_parallelism_threads = inter_op_threads
    if xla:
        config.graph_options.optimizer_options.global_jit_level = tf.compat.v1.OptimizerOptions.ON_1
    if rewrite:
        config.graph_options.rewrite_options.auto_mixed_precision_onednn_bfloat16 = rewriter_config_pb2.RewriterConfig.ON
    return config


def build_run_config(model_dir, plan, checkpoint_steps, summary_steps, keep_checkpoints=5, seed=None,
                     session=None, mirrored_evaluation=False):
    """Returns the RunConfig: the plan's strategy for training, checkpoint and summary cadence, and
    `session` (see session_config; None: the Estimator's default).

    Evaluation runs on one device, or with `mirrored_evaluation` over the plan's
    replicas: its input must then come in batches whose number is a multiple of
    the replicas (see replica_batched_input_fn), or the last ones are dropped.
    """
    return tf.estimator.RunConfig(
        model_dir=model_dir,
        tf_random_seed=seed,
        save_checkpoints_steps=checkpoint_steps,
        save_summary_steps=summary_steps,
        log_step_count_steps=None,  # the run loop's ProgressHook logs loss and speed, in one line
        keep_checkpoint_max=keep_checkpoints,
        train_distribute=plan.strategy,
        eval_distribute=plan.strategy if mirrored_evaluation else None,
        session_config=session)


def estimator_from_keras(keras_model, run_config, class_names=None, augment=(), augment_seed=0, mixing=None,
                         ema=None, checkpoints=None, weights_from=None, conv_gradients_by_matmul=False):
    """Returns the Estimator made from `keras_model` by model_to_estimator.

    Each evaluation leaves each replica's probabilities, labels and file names (the
    input's FILE_KEY feature, when it has one) for a hooks.scores.ScoreCollectorHook.
    With `class_names`, each evaluation also gives per-class precision and recall
    and a confusion-matrix image, and its predictions and serving signature name
    the predicted class (see serving.export.with_class_names). Training writes
    its loss and accuracy under evaluation's tags (add_training_summaries).

    A model dir without a checkpoint starts from the Keras model's current
    weights (the tasks of a cluster one after another: see model_dir.warm_start_lock);
    one with a checkpoint resumes from it. `weights_from` (a function returning a dict, see weights_origin,
    called only for a model dir without a checkpoint) names where those weights came from: first weights
    that a start stopped before its first checkpoint left with another origin are not this run's
    (model_dir.first_weights). model_to_estimator's model_fn
    saves through a Saver of its own that keeps 5 checkpoints whatever the
    RunConfig says; its model_fn is wrapped here so that keep_checkpoint_max holds.

    `augment` (input_fns.augmentation's transforms) is applied to training batches
    only, drawn from (`augment_seed`, the global step, the replica); so is `mixing`
    (a pipeline.mixing.Mixing: mixup, cutmix, label smoothing), after it.

    `ema` (a decay, or None) keeps a moving average of the weights that evaluations and exports read
    (see pipeline.ema); the Estimator's `moving_average` is then its ema.MovingAverage.

    `checkpoints` (a hooks.checkpoint_saver.CheckpointCadence, or None for the Estimator's own saver
    every save_checkpoints_steps since training started) is when training saves checkpoints.

    With `conv_gradients_by_matmul`, the convolutions pipeline.conv_gradients.by_matmul picks compute their
    weight gradients as one matmul each in training (--conv-gradients).
    """
    def origin_of():
        return weights_origin(keras_model, weights_from() if weights_from else None)
    with model_dir_lib.first_weights(run_config.model_dir, origin_of):
        estimator = tf.keras.estimator.model_to_estimator(keras_model=keras_model, config=run_config,
                                                          checkpoint_format=checkpoint_format(keras_model))
    _warm_start_every_weight(estimator, keras_model)
    keras_model_fn, keep = estimator._model_fn, run_config.keep_checkpoint_max
    average = estimator.moving_average = ema_lib.MovingAverage(ema, keras_model) if ema else None
    names = warm_start_names(keras_model)

    def model_fn(features, labels, mode):
        keys = None
        if isinstance(features, dict) and FILE_KEY in features:  # the file names, not a model input
            features = dict(features)
            keys = features.pop(FILE_KEY)
        if mode == tf.estimator.ModeKeys.TRAIN and augment:
            features = augmented(features, augment, augment_seed)
        if mode == tf.estimator.ModeKeys.TRAIN and mixing:
            features, labels = mixed(features, labels, mixing, augment_seed)
        # Training graphs only: an export's Conv2D ops would otherwise name a gradient only this project registers.
        with conv_gradients.gradients_by_matmul(conv_gradients_by_matmul and mode == tf.estimator.ModeKeys.TRAIN):
            spec = keras_model_fn(features, labels, mode)
        probabilities = next(iter(spec.predictions.values()))  # the models' one softmax output
        if spec.scaffold is not None and spec.scaffold.saver is not None:
            spec.scaffold.saver._max_to_keep = keep
            spec.scaffold.saver.saver_def.max_to_keep = keep
        if average is not None:
            spec = ema_lib.with_average(spec, mode, average, keep)
        if mode == tf.estimator.ModeKeys.TRAIN:
            add_training_summaries(spec.loss, probabilities, labels)
            spec = _with_saver_without_duplicates(spec, keep)
            check_warm_start_reaches_every_weight(names)
            spec = _with_warm_start_of_wrapped_variables(spec)
            if checkpoints is not None:
                spec = _with_checkpoint_saver(spec, run_config, checkpoints)
            if synchronous_multi_worker():  # a stop signal ends every trainer after the same step
                spec = spec._replace(train_op=add_stop_agreement(spec.train_op))
            if spec.scaffold is not None and spec.scaffold.saver is not None:
                # The `checkpoint` file names checkpoints by name, as the Estimator's own Saver does: a model
                # dir moved or copied (renamed, rsynced from a cluster) resumes from its own.
                spec.scaffold.saver._save_relative_paths = True
        if mode == tf.estimator.ModeKeys.EVAL:
            spec = _evaluation_spec(spec, probabilities, labels, keys, class_names)
        if mode == tf.estimator.ModeKeys.PREDICT and class_names:
            spec = with_class_names(spec, probabilities, class_names)
        return spec

    estimator._model_fn = run_as_written(model_fn)  # TF 2.15, the last Estimator release: private, but frozen
    return estimator


def weights_origin(keras_model, weights_from=None):
    """Returns what decides `keras_model`'s first weights, as keras/first_weights.json records it: the dict
    `weights_from` (--init-from's checkpoint, --weights, --seed: the same in every task of a launch) and a
    digest of the model's weights' names and shapes."""
    shapes = json.dumps([[w.name, w.shape.as_list()] for w in keras_model.weights])
    return {**(weights_from or {}), "model": hashlib.sha256(shapes.encode()).hexdigest()[:16]}


def synchronous_multi_worker():
    """Returns whether the model_fn is built under multi_worker_mirrored (TF 2.15's TF1 class), whose
    trainers take every step together: one that stops on its own leaves the others waiting in the
    next step's all-reduce, where no signal reaches their Python (hooks.stop.add_stop_agreement)."""
    return tf.distribute.has_strategy() and isinstance(
        tf.distribute.get_strategy(), tf.compat.v1.distribute.experimental.MultiWorkerMirroredStrategy)


def _warm_start_every_weight(estimator, keras_model):
    """Makes `estimator`'s warm start (from model_to_estimator's first checkpoint, in keras/) start every
    weight of `keras_model`, the non-trainable ones too. model_to_estimator's own starts only those in the
    graph's TRAINABLE_VARIABLES (a WarmStartSettings regex's reach), so BatchNormalization's moving mean
    and variance began at 0 and 1 whatever the weights (pretrained, --init-from): a frozen backbone then
    normalised every feature wrongly for good. A list of names reaches GLOBAL_VARIABLES; each is anchored
    at its ':' so that none matches another's prefix.

    It also points the warm start at keras/ itself where the file system calls the checkpoint's prefix a
    folder: ram:// does (TF 2.15), and the warm start then looked for a checkpoint inside it and failed
    with "TypeError: Expected binary or unicode string, got None"."""
    settings = estimator._warm_start_settings
    if settings is None:  # model_to_estimator wrote no first checkpoint
        return
    settings = settings._replace(vars_to_warm_start=[re.escape(name) + ":" for name in warm_start_names(keras_model)])
    if tf.io.gfile.isdir(settings.ckpt_to_initialize_from):
        folder = settings.ckpt_to_initialize_from.rstrip("/").rsplit("/", 1)[0]
        if tf.train.latest_checkpoint(folder):
            settings = settings._replace(ckpt_to_initialize_from=folder)
    estimator._warm_start_settings = settings


def warm_start_names(keras_model):
    """Returns the names of the variables a new model dir warm-starts (_warm_start_every_weight): those of
    every weight of `keras_model`, which the model_fn's clone of it gives its variables."""
    return [ema_lib.variable_name(w) for w in keras_model.weights]


def check_warm_start_reaches_every_weight(names):
    """Raises RuntimeError when the training graph has no variable of one of `names` (warm_start_names'):
    the warm start, which matches them by name, would leave that weight as its initializer drew it."""
    missing = sorted(set(names) - {ema_lib.variable_name(v) for v in tf.compat.v1.global_variables()})
    if missing:
        raise RuntimeError(f"the training graph has no variables named {', '.join(missing[:3])}: a new model dir "
                           "would not start from those weights of the Keras model")


def _with_warm_start_of_wrapped_variables(spec):
    """Returns the training EstimatorSpec `spec` whose scaffold, when the session starts from no checkpoint,
    runs the warm start of the graph's AggregatingVariables (CentralStorageStrategy's and ParameterServer's
    wrappers), then the init_fn it had (--ema's, which copies the starting weights into the shadows).

    The Estimator's warm start sets its restore op as each variable's _initializer_op, but a wrapper's
    initializer is the wrapped variable's own: nothing ran the op, and such a run trained from random
    weights whatever the Keras model's (pretrained, --init-from)."""
    wrapped = [v for v in tf.compat.v1.global_variables() if _is_aggregating(v)]
    if not wrapped:
        return spec
    earlier = spec.scaffold._user_init_fn if spec.scaffold is not None else None

    def init_fn(scaffold, session):
        # Set on the wrapper by the warm start alone: getattr would read the wrapped variable's own initializer.
        warm_starts = [vars(v)["_initializer_op"] for v in wrapped if vars(v).get("_initializer_op") is not None]
        if warm_starts:
            session.run(warm_starts)
        if earlier is not None:
            earlier(scaffold, session)
    return spec._replace(scaffold=tf.compat.v1.train.Scaffold(init_fn=init_fn, copy_from_scaffold=spec.scaffold))


def _is_aggregating(variable):
    """Returns whether `variable` is an AggregatingVariable: a CentralStorageStrategy's (or a ParameterServer
    strategy's, with several replicas a worker) wrapper of the variable it updates once for all replicas."""
    return type(variable).__name__ == "AggregatingVariable"


def checkpoint_format(keras_model):
    """Returns model_to_estimator's checkpoint format for `keras_model`: object-based ('checkpoint',
    its default), or name-based ('saver') for models with sync-on-read variables (BatchNormalization's
    moving statistics), whose object-based saver model_to_estimator would build in a replica's
    context, where a strategy cannot read them ("requires being in cross-replica context")."""
    on_read = tf.VariableSynchronization.ON_READ
    return "saver" if any(v.synchronization == on_read for v in keras_model.variables) else "checkpoint"


def _evaluation_spec(spec, probabilities, labels, keys, class_names):
    """Returns the EVAL EstimatorSpec `spec` leaving each replica's scores for a
    hooks.scores.ScoreCollectorHook, its loss the mean over the replicas, and with `class_names` the
    per-class metrics."""
    add_scores_to_collection(probabilities, labels, keys)
    spec = spec._replace(eval_metric_ops={**spec.eval_metric_ops,
                                          CROSS_ENTROPY: mean_cross_entropy(labels, probabilities)})
    if tf.distribute.has_strategy():  # each replica's loss comes divided by the replicas, as in training
        spec = spec._replace(loss=spec.loss * tf.distribute.get_strategy().num_replicas_in_sync)
    if class_names:
        spec = spec._replace(eval_metric_ops={**spec.eval_metric_ops,
                                              **per_class_metric_ops(labels, probabilities, class_names)})
    return spec


def _with_saver_without_duplicates(spec, keep):
    """Returns the training EstimatorSpec `spec`, its scaffold given saver_without_duplicates' Saver
    when it has no Saver of its own and that returns one."""
    saver = saver_without_duplicates(keep) if spec.scaffold is not None and spec.scaffold.saver is None else None
    if saver is None:
        return spec
    return spec._replace(scaffold=tf.compat.v1.train.Scaffold(saver=saver, copy_from_scaffold=spec.scaffold))


def _with_checkpoint_saver(spec, run_config, checkpoints):
    """Returns the training EstimatorSpec `spec` with a CadenceCheckpointSaverHook among its chief hooks,
    which the Estimator then uses in place of its own. The hook saves with the spec's Saver when the
    model_fn made one, else with the one the Estimator puts in the SAVERS collection, as the
    Estimator's own hook would (under a distribution the Estimator's scaffold takes the first
    replica's Saver: the same one)."""
    scaffold = spec.scaffold if spec.scaffold is not None and spec.scaffold.saver is not None else None
    hook = CadenceCheckpointSaverHook(run_config.model_dir, checkpoints, scaffold=scaffold,
                                      save_graph_def=run_config.checkpoint_save_graph_def)
    return spec._replace(training_chief_hooks=tuple(spec.training_chief_hooks) + (hook,))


def saver_without_duplicates(keep):
    """Returns a name-based Saver over the graph's global variables, each once, or None when none is listed
    twice. Two strategies list optimizer slots twice (the default Saver of a name-based checkpoint,
    checkpoint_format 'saver', then fails or saves one key per replica):
    - CentralStorageStrategy: bare and in its AggregatingVariable, under one name, which that Saver
      refuses ("At least two variables have the same name");
    - MirroredStrategy, for the slots of BatchNormalization's gamma and beta: the MirroredVariable and each
      replica's copy on its own (`<name>/replica_1`, ...). That Saver wrote a key per replica, so a
      checkpoint of 1 replica could not be resumed on 2 (NotFoundError: `.../m/replica_1`).
    The Saver keeps the bare variable of an AggregatingVariable and the MirroredVariable of its copies,
    whose restore assigns every replica's copy: its checkpoints resume on any number of replicas."""
    every = tf.compat.v1.global_variables()
    copies = {id(c) for v in every if type(v).__name__ == "MirroredVariable" for c in v.values if c is not v}
    aggregating = any(map(_is_aggregating, every))
    if not copies and not aggregating:  # other strategies, and mirrored variables listed once: their own saver
        return None
    chosen = {}
    for variable in every:
        if id(variable) in copies:
            continue
        name = variable.op.name
        if name not in chosen or _is_aggregating(chosen[name]):  # keep the bare one
            chosen[name] = variable
    if len(chosen) == len(every):
        return None
    # Built when the session is made (Scaffold.finalize), in cross-replica context: built here, in a replica's,
    # a MirroredVariable would save and restore that replica's copy alone.
    saver = tf.compat.v1.train.Saver(sharded=True, max_to_keep=keep, allow_empty=True, defer_build=True)
    saver._var_list = list(chosen.values())  # a list: the Saver takes each distributed variable's own saveables
    return saver


def augmented(features, transforms, seed):
    """Returns the features (the models' one image input, alone or in a dict) with `transforms` drawn
    for this step and replica (see input_fns.augmentation)."""
    replica = tf.distribute.get_replica_context().replica_id_in_sync_group if tf.distribute.has_strategy() else 0
    step = tf.compat.v1.train.get_global_step()
    if isinstance(features, dict):
        (key, images), = features.items()
        return {key: augmentation.augment(images, transforms, seed, step, replica)}
    return augmentation.augment(features, transforms, seed, step, replica)


def mixed(features, labels, settings, seed):
    """Returns (features, labels) of a training batch mixed and its labels smoothed as `settings` (a
    pipeline.mixing.Mixing) say, drawn for this step and replica (see input_fns.mixing)."""
    replica = tf.distribute.get_replica_context().replica_id_in_sync_group if tf.distribute.has_strategy() else 0
    step = tf.compat.v1.train.get_global_step()
    (key, images), = features.items() if isinstance(features, dict) else ((None, features),)
    images, labels = mixing_lib.mix(images, labels, settings.mixup, settings.cutmix, settings.switch_prob, seed,
                                    step, replica)
    labels = mixing_lib.smooth_labels(labels, settings.label_smoothing)
    return ({key: images} if isinstance(features, dict) else images), labels


def add_training_summaries(loss, probabilities, labels):
    """Adds the training `loss` and the batch's accuracy to TensorBoard under the tags evaluation
    uses, 'loss' and 'accuracy', so that both curves share a chart.

    The Estimator would write the loss as 'loss_1' (Keras has taken the name scope
    'loss'); it adds its own only when no summary op is named 'loss', which a
    name scope ending in '/' can still create. Under a strategy the model_fn runs
    once per replica: the first replica's figures are written, its loss times the
    replicas (the Estimator divides each replica's loss by their number, so that
    their sum is the mean).
    """
    graph = tf.compat.v1.get_default_graph()
    try:
        graph.get_operation_by_name("loss")
        return  # written by an earlier replica
    except KeyError:
        pass
    replicas = tf.distribute.get_strategy().num_replicas_in_sync if tf.distribute.has_strategy() else 1
    accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(probabilities, -1), tf.argmax(labels, -1)), tf.float32))
    for tag, value in (("loss", loss * replicas), ("accuracy", accuracy)):
        summary = tf.raw_ops.ScalarSummary(tags=tag, values=tf.cast(value, tf.float32), name=f"{tag}/")
        tf.compat.v1.add_to_collection(tf.compat.v1.GraphKeys.SUMMARIES, summary)


def run_as_written(model_fn):
    """Returns `model_fn`, its argument names still readable by the Estimator, marked for AutoGraph not to
    convert. A distribution strategy's call_for_each_replica converts what it calls (the Keras model_fn's
    whole chain: 3.6 s of a 20 s Fashion run on 2 replicas); it branches on Python values only, and the
    Estimator calls it as written on one device."""
    return tf_decorator.make_decorator(model_fn, tf.autograph.experimental.do_not_convert(model_fn))


def replica_batched_input_fn(input_fn, num_examples, batch_size, replicas):
    """Returns an evaluation input_fn giving `input_fn`'s `num_examples` examples in the batches of
    pipeline.batching.batch_sizes_for_replicas: a mirrored evaluation then counts each exactly once."""
    sizes = batch_sizes_for_replicas(num_examples, batch_size, replicas)

    def replica_input_fn(input_context=None):
        ends, lengths = tf.constant(np.cumsum(sizes), tf.int64), tf.constant(sizes, tf.int64)

        @tf.autograph.experimental.do_not_convert  # see input_fns' docstring
        def batch_of(index, example):
            return tf.searchsorted(ends, index[None], side="right", out_type=tf.int64)[0]

        @tf.autograph.experimental.do_not_convert
        def batched(key, window):
            return window.map(tf.autograph.experimental.do_not_convert(lambda index, example: example)).batch(
                lengths[key])
        examples = input_fn(input_context=input_context).unbatch().enumerate()
        window_size = tf.autograph.experimental.do_not_convert(lambda key: lengths[key])
        return examples.group_by_window(batch_of, batched, window_size_func=window_size)
    return replica_input_fn
