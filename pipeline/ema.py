"""--ema: an exponential moving average of the trained weights, updated by every step, saved in every
checkpoint beside the raw weights, and the weights every evaluation and export of a checkpoint reads.

After global step t the shadow of each trainable weight w is `decay * shadow + (1 - decay) * w_t` (Keras'
`use_ema` rule, which the legacy optimizers that model_to_estimator needs do not have), starting from
the weights training starts from. The update is chained to the train op, in the step's own session
run: the checkpoint saver, which runs after it, saves step t's weights with step t's shadows, and a
resume restores both. Under a strategy the shadows are mirrored variables updated once per step, in
cross-replica context, from each device's copy of the (already all-reduced) weights, in float32 (the
variables' type under bf16 too). Checkpoints name each shadow `ema/<the raw weight's key>`.

In EVAL and PREDICT modes the model_fn's saver restores each trainable weight from its shadow (as
tf.compat.v1.train.ExponentialMovingAverage.variables_to_restore does), so validation, the best
model, the test evaluation and the export all read the averaged weights; `raw_weights` evaluates
the raw ones instead.
"""
import contextlib

import tensorflow as tf
from tensorflow.python.training.saving import saveable_object_util

from pipeline import model_dir as model_dir_lib, training_record
from pipeline.errors import FlagError
from pipeline.metrics import CROSS_ENTROPY

SHADOW_PREFIX = "ema/"
_VALUE = "VARIABLE_VALUE"  # trackable.VARIABLE_VALUE_KEY: a variable's one saveable


class MovingAverage:
    """A run's weight average: its `decay`, the names of the weights it averages (a Keras model's trainable
    weights), and whether evaluations read the `raw` weights instead."""

    def __init__(self, decay, keras_model):
        self.decay = float(decay)
        self.names = {variable_name(w) for w in keras_model.trainable_weights}
        self.raw = False


def shadow_key(key):
    """Returns the checkpoint key of the shadow of the weight saved under `key`."""
    return SHADOW_PREFIX + key


@tf.autograph.experimental.do_not_convert  # the Estimator's distributed model_fn calls go through AutoGraph
def with_average(spec, mode, average, keep):
    """Returns `spec` (an EstimatorSpec of model_to_estimator's model_fn) with the average: in TRAIN mode
    a train op that also updates the shadows and a scaffold that starts and saves them (keeping `keep`
    checkpoints); in EVAL and PREDICT a saver that restores the shadows into the weights (unless
    `average.raw`)."""
    if mode == tf.estimator.ModeKeys.TRAIN:
        return _training_spec(spec, average.decay, keep, _trainable(average.names))
    if average.raw:
        return spec
    return spec._replace(scaffold=tf.compat.v1.train.Scaffold(saver=_averaged_saver(spec, _trainable(average.names))))


def unwrapped(variable):
    """Returns the float32 variable inside a mixed-precision AutoCastVariable (or `variable` itself)."""
    return getattr(variable, "_variable", variable)


def variable_name(variable):
    """Returns `variable`'s name without its ':0': its key in a name-based checkpoint."""
    return variable.name.split(":")[0]


def _trainable(names):
    """Returns the variables of the model_fn's graph named `names` (the Keras model's trainable weights:
    the graph's trainable collection also holds frozen layers' weights, which never change)."""
    found = [unwrapped(v) for v in tf.compat.v1.trainable_variables() if variable_name(unwrapped(v)) in names]
    if len(found) != len(names):
        missing = sorted(names - {variable_name(v) for v in found})
        raise RuntimeError(f"--ema: the Estimator's graph has no variables named {', '.join(missing[:3])}")
    return found


def _saveable(variable, key):
    """Returns what a Saver's var_list dict holds to save or restore `variable` under `key`: the variable,
    or for a distributed one a saveable of all its copies (a dict entry of the variable itself would
    restore only its first copy)."""
    if isinstance(variable, tf.distribute.DistributedValues):
        return variable._gather_saveables_for_checkpoint()[_VALUE](name=key)
    return variable


def _variable_of(saveable, by_handle):
    """Returns the variable an object-based saver's `saveable` saves (found by its handle's name in
    `by_handle` for a variable saved through its read tensor, as mixed precision's are), or None (the
    object graph)."""
    variable = getattr(saveable, "_mirrored_variable", None) or getattr(saveable, "op", None)
    if not isinstance(variable, tf.Variable) and getattr(saveable, "handle_op", None) is not None:
        variable = by_handle.get(saveable.handle_op.name)
    return unwrapped(variable) if isinstance(variable, tf.Variable) else None


def _checkpoint_entries(spec):
    """Returns [(checkpoint key, variable or None, what a Saver's var_list dict holds for the key)] for
    everything the Estimator checkpoints: the object-based saver of `spec`'s scaffold, or else the
    name-based default (every global variable and saveable object)."""
    saver = spec.scaffold.saver if spec.scaffold else None
    if saver is not None:
        by_handle = {v.handle.name: v for v in map(unwrapped, tf.compat.v1.global_variables())
                     if not isinstance(v, tf.distribute.DistributedValues)}
        variables = [_variable_of(s, by_handle) for s in saver._var_list]
        return [(s.specs[0].name if v is not None else s.name, v, s) for s, v in zip(saver._var_list, variables)]
    entries = []
    for variable in tf.compat.v1.global_variables() + tf.compat.v1.get_collection(
            tf.compat.v1.GraphKeys.SAVEABLE_OBJECTS):
        for key, value in saveable_object_util.op_list_to_dict([variable]).items():
            entries.append((key, variable if isinstance(variable, tf.Variable) else None, value))
    return entries


def _averaged_saver(spec, averaged):
    """Returns a Saver that restores each variable of `averaged` from its shadow, and everything else as
    saved."""
    trainable = {id(v) for v in averaged}
    var_list = {}
    for key, variable, value in _checkpoint_entries(spec):
        if variable is not None and id(variable) in trainable:
            var_list[shadow_key(key)] = _saveable(variable, shadow_key(key))
        elif not key.startswith(SHADOW_PREFIX):
            var_list[key] = value
    # Built when the session is made, in cross-replica context, where a mirrored evaluation's sync-on-read
    # variables (BatchNormalization's statistics) can be read: a Saver defers only its default list.
    saver = tf.compat.v1.train.Saver(sharded=True, defer_build=True)
    saver._var_list = var_list
    if not tf.distribute.has_strategy():  # an export restores with it before any session is made
        saver.build()
    return saver


def _training_spec(spec, decay, keep, averaged):
    """Returns the TRAIN `spec` whose train op updates the shadows of the variables `averaged` after the
    step, whose scaffold starts them at the initial weights and whose saver (object-based models) saves
    them too."""
    entries = [(key, variable) for key, variable, _ in _checkpoint_entries(spec)
               if variable is not None and id(variable) in {id(v) for v in averaged}]
    if len(entries) != len(averaged):
        raise RuntimeError(f"--ema: {len(averaged) - len(entries)} trainable weights are not in the checkpoint")

    def in_cross_replica_context(strategy, train_op):
        shadows = [_shadow_for(variable) for _, variable in entries]
        pairs = list(zip(shadows, (variable for _, variable in entries)))
        start = tf.group([strategy.extended.update(s, _copy, args=(w,)) for s, w in pairs])
        with tf.control_dependencies(strategy.experimental_local_results(train_op)):
            update = tf.group([strategy.extended.update(s, _moved, args=(w, decay)) for s, w in pairs])
        return update, start, shadows

    # Every replica gets the one update, start and shadows (made once, by the first replica's call).
    train_op, start, shadows = tf.distribute.get_replica_context().merge_call(
        in_cross_replica_context, args=(spec.train_op,))
    saver = spec.scaffold.saver
    if saver is not None:  # object-based: model_to_estimator's saver holds the model's variables only
        var_list = {s.name: s for s in saver._var_list}
        var_list.update({shadow_key(key): _saveable(shadow, shadow_key(key))
                         for (key, _), shadow in zip(entries, shadows)})
        averaged = tf.compat.v1.train.Saver(var_list=var_list, sharded=True, max_to_keep=keep)
        averaged._object_restore_saver = getattr(saver, "_object_restore_saver", None)
        saver = averaged
    scaffold = tf.compat.v1.train.Scaffold(saver=saver, init_fn=lambda _, session: session.run(start))
    return spec._replace(train_op=train_op, scaffold=scaffold)


def _shadow_for(variable):
    """Returns a new float32 variable shaped as `variable`, named `ema/<its name>` (in a name-based
    checkpoint, its key): zeros until the scaffold's init_fn copies the starting weights in."""
    name = shadow_key(variable.name.split(":")[0])
    with tf.compat.v1.name_scope(None):
        # A v1 variable: a strategy puts the mirrored one, not each copy, in the global collection.
        shadow = tf.compat.v1.Variable(lambda: tf.zeros(variable.shape, tf.float32), trainable=False, name=name,
                                       use_resource=True, synchronization=tf.VariableSynchronization.ON_WRITE)
    if shadow.name.split(":")[0] != name:
        raise RuntimeError(f"the shadow of {variable.name} was named {shadow.name}, not {name}")
    return shadow


def _copy(shadow, weight):
    """Returns the op setting `shadow` to `weight`."""
    return shadow.assign(tf.cast(weight, tf.float32))


def _moved(shadow, weight, decay):
    """Returns the op moving `shadow` to decay * shadow + (1 - decay) * weight."""
    return shadow.assign(decay * shadow + (1.0 - decay) * tf.cast(weight, tf.float32))


@contextlib.contextmanager
def raw_weights(estimator):
    """While entered, `estimator`'s evaluations and exports read the raw weights, not the average."""
    average = estimator.moving_average
    average.raw = True
    try:
        yield estimator
    finally:
        average.raw = False


FIRST_WEIGHTS_WARNED = 0.05  # the share of the first weights in the average above which too_few_steps warns


def too_few_steps(decay, max_steps):
    """Returns one line when --ema's average, which has no bias correction, still holds more than
    FIRST_WEIGHTS_WARNED of the first weights after the `max_steps` the run trains in all (decay ** steps):
    the averaged weights, which every figure reads, are then largely untrained; else None."""
    first_share = decay ** max_steps if decay else 0.0
    if first_share <= FIRST_WEIGHTS_WARNED:
        return None
    return (f"--ema {decay:g}: after the {max_steps} steps this run trains in all, {first_share:.0%} of the "
            "average is still the first, untrained weights (it averages over about the last "
            f"{1 / (1 - decay):.0f} steps, with no bias correction), and every figure reads it; train longer, or "
            "lower the decay")


def compare(estimator, input_fn, checkpoint, averaged=None):
    """Returns results.json's `ema`: the decay, the step of `checkpoint`, and the test accuracy and loss
    of its averaged and raw weights on `input_fn` (`averaged`: that evaluation's dict, if made already)."""
    averaged = averaged or estimator.evaluate(input_fn, checkpoint_path=checkpoint, name="ema_averaged")
    with raw_weights(estimator):
        raw = estimator.evaluate(input_fn, checkpoint_path=checkpoint, name="ema_raw")

    def figures(evaluation):
        return {"accuracy": float(evaluation["accuracy"]), "loss": float(evaluation[CROSS_ENTROPY])}
    return {"decay": estimator.moving_average.decay, "step": int(raw["global_step"]),
            "averaged": figures(averaged), "raw": figures(raw)}


def check(args, reads_checkpoint):
    """Raises FlagError (exit 2) where --ema cannot work, or its absence would mislead: asynchronous
    parameter-server training, or a model dir whose latest checkpoint (looked at when `reads_checkpoint`:
    the role that writes the model dir) was trained without it, or with it when it is not given (the best
    checkpoint was chosen and exported on its average, which a run without it neither continues nor
    tests); returns None otherwise."""
    if not hasattr(args, "ema"):
        return
    if not args.ema:
        if reads_checkpoint and any(name.startswith(SHADOW_PREFIX) for name in _checkpoint_names(args.model_dir)):
            decay = training_record.newest_run(args.model_dir).get("ema")
            with_decay = (f"--ema {decay:g}" if decay else
                          f"--ema and the decay it was trained with ({training_record.PROGRESS_FILE})")
            raise FlagError(f"--ema: the checkpoint in {args.model_dir} was trained with --ema, and its best model "
                            f"was chosen and exported on the average; resume (or evaluate) it with {with_decay}, or "
                            "pass another --model-dir")
        return
    if args.strategy == "parameter_server":
        raise FlagError("--ema does not work with --strategy parameter_server: its asynchronous workers would "
                        "update the shared average concurrently, from weights other workers are changing; use "
                        "--strategy multi_worker_mirrored")
    names = _checkpoint_names(args.model_dir) if reads_checkpoint else []
    if names and not any(name.startswith(SHADOW_PREFIX) for name in names):
        if not model_dir_lib.latest_global_step(args.model_dir):  # a first save, killed before any step
            raise FlagError(f"--ema: {args.model_dir} holds only the first checkpoint (step 0, nothing trained) of a "
                            "run without --ema; remove that model dir and run again with --ema, or run without it")
        raise FlagError(f"--ema: the checkpoint in {args.model_dir} was trained without --ema and holds no average "
                        "to continue or evaluate; run without --ema, or pass another --model-dir")


def _checkpoint_names(model_dir):
    """Returns the variable names of the latest checkpoint in `model_dir`; [] when there is none, or it
    cannot be read (the model dir's own checks say so)."""
    try:
        checkpoint = tf.train.latest_checkpoint(model_dir)
        return list(model_dir_lib.read_checkpoint(checkpoint).get_variable_to_shape_map()) if checkpoint else []
    except (tf.errors.OpError, ValueError):
        return []
