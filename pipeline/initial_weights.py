"""--init-from: a new run's weights taken from another run's model dir, the second stage of transfer
learning (train the head, then fine-tune more layers at a lower rate in a model dir of its own).

The weights are those the other run's results report: its best checkpoint on validation (the copy in
best/), else its newest that reads back whole; with --ema, the average its evaluations and export read.
They go into the Keras model before model_to_estimator writes its first checkpoint, the one a new model
dir warm-starts from (pipeline.estimator.estimator_from_keras); the optimizer's state, the global step
and the rate's schedule start afresh. Nothing in the other model dir is written.
"""
import dataclasses
import json
import os
from typing import Optional

import tensorflow as tf
from tensorflow.python.checkpoint import graph_view

from acquisition import locks, storage
from pipeline import model_dir as model_dir_lib, training_record
from pipeline.ema import SHADOW_PREFIX, shadow_key, unwrapped, variable_name
from pipeline.errors import FlagError, UsageError
from pipeline.init_from import no_such_folder
from pipeline.results import RESULTS_FILE
from pipeline.validation.record import read_record

OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"  # in object-based checkpoints only
_LAYER_KEY_PREFIX = "layer_with_weights-"
_VALUE_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"
BEST, NEWEST = "its best on validation", "its newest checkpoint"


@dataclasses.dataclass(frozen=True)
class InitialWeights:
    """The checkpoint a new run's weights come from: the `model_dir` given, the `checkpoint` prefix, its
    global `step`, which one it is (`chosen`: BEST or NEWEST) and whether it holds an --ema average
    (`averaged`), which the weights then take."""
    model_dir: str
    checkpoint: str
    step: int
    chosen: str
    averaged: bool

    def describe(self):
        """Returns the header's words for these weights."""
        average = ", its --ema average" if self.averaged else ""
        return f"{self.checkpoint} (step {self.step}, {self.chosen}{average})"

    def as_record(self):
        """Returns these weights as training_progress.json and results.json keep them."""
        return dataclasses.asdict(self)


def resolve(init_from):
    """Returns the InitialWeights of --init-from `init_from` for a new run. Raises FlagError (exit 2) for a
    folder that is missing or without a checkpoint; UsageError (exit 1) for one another run is training in,
    or whose recorded checkpoint cannot be read."""
    _check_folder(init_from)
    checkpoint, chosen = _best_or_newest(init_from)
    keys = model_dir_lib.read_checkpoint(checkpoint).get_variable_to_shape_map()
    return InitialWeights(storage.absolute(init_from), checkpoint, int(checkpoint.rsplit("-", 1)[1]), chosen,
                          any(key.startswith(SHADOW_PREFIX) for key in keys))


def _check_folder(init_from):
    """Raises when `init_from` is missing (at a URL: one on this machine is refused before, with this run's
    own model dir, by pipeline.init_from.check_folder) or the model dir of a run still training."""
    if not storage.isdir(init_from):
        raise no_such_folder(init_from)
    training = model_dir_lib.run_holding(init_from)
    if training:
        gone = f" (or, if it is gone, {locks.LEASE_SECONDS:.0f} s for its lease to expire)" \
            if storage.is_url(init_from) else ""
        raise UsageError(f"--init-from {init_from}: another run ({training}) is training there, and its best "
                         f"checkpoint may still change; wait for it to finish{gone}, then start this run")


def _best_or_newest(init_from):
    """Returns (checkpoint prefix, BEST or NEWEST): the best validation.json in `init_from` records, else its
    newest checkpoint that reads back whole."""
    try:
        best = read_record(init_from)["best"]
    except UsageError:
        raise UsageError(f"--init-from {init_from}: its validation.json, which names its best checkpoint, cannot be "
                         "read; restore it, or pass another run's model dir") from None
    if not best:
        return _newest_readable(init_from), NEWEST
    problem = model_dir_lib.checkpoint_problem(best["checkpoint"])
    if problem:
        raise UsageError(f"--init-from {init_from}: its best checkpoint {best['checkpoint']} cannot be read "
                         f"({problem}); restore it, or pass another run's model dir")
    return best["checkpoint"], BEST


def _newest_readable(init_from):
    """Returns the prefix of the newest checkpoint in `init_from` that reads back whole; raises when there
    is none. Damaged ones are skipped, never renamed: the folder is another run's."""
    problems = []
    for prefix in model_dir_lib.candidate_checkpoints(init_from):
        problem = model_dir_lib.checkpoint_problem(prefix)
        if problem is None:
            return prefix
        problems.append(f"{os.path.basename(prefix)}: {problem}")
    if problems:
        raise UsageError(f"--init-from {init_from}: no checkpoint in it can be read ({'; '.join(problems[:2])}); "
                         "pass another run's model dir")
    raise FlagError(f"--init-from {init_from} holds no checkpoint; pass the --model-dir of a run that has trained")


def load(keras_model, initial, settings=None, job=None):
    """Sets every weight of `keras_model` to its value in the checkpoint of `initial` (an InitialWeights),
    each trainable one averaged when the checkpoint holds its --ema shadow; returns how many were set.
    Raises FlagError (exit 2) when the checkpoint holds a model of another shape (another --model,
    --image-size, --channels or number of classes), naming the first differences and the shaping flags
    the source run recorded other than this run's `settings`, or the source's job where it is not `job`."""
    reader = model_dir_lib.read_checkpoint(initial.checkpoint)
    shapes = reader.get_variable_to_shape_map()
    object_based = OBJECT_GRAPH_KEY in shapes
    keys = _object_keys(keras_model) if object_based else {}
    raw = [keys.get(id(unwrapped(weight)), variable_name(weight)) for weight in keras_model.weights]
    chosen = [shadow_key(key) if shadow_key(key) in shapes else key for key in raw]
    problems = _misfits(keras_model.weights, chosen, shapes)
    unused = sorted(set(_layer_keys(shapes) if object_based else _named_weight_keys(shapes)) - set(raw))
    problems += [f"it has a weight this model lacks ({key.replace(_VALUE_SUFFIX, '')})" for key in unused[:1]]
    if problems:
        raise FlagError(f"--init-from: the checkpoint {initial.checkpoint} does not fit the model these flags build "
                        f"({'; '.join(problems[:2])}); {_misfit_fix(initial.model_dir, settings, job)}")
    keras_model.set_weights([reader.get_tensor(key) for key in chosen])  # in graph mode too (a cluster's tasks)
    return len(chosen)


def _misfit_fix(model_dir, settings, job):
    """Returns the advice for a checkpoint in `model_dir` that does not fit this run's model: the run of another
    job than `job` (this run's) is named as such; else the shaping flags it recorded other than `settings`'."""
    shaping = [f"--{flag}" for flag in ("model", "image-size", "channels")
               if settings is None or hasattr(settings, flag.replace("-", "_"))]
    theirs = training_record.recorded_job(model_dir)
    if job and theirs and theirs != job:
        return (f"it is a run of the {theirs} job (its {training_record.PROGRESS_FILE}), and this {job} run builds "
                f"another model; pass the model dir of {_a(job)} run"
                + (f", or the {'/'.join(shaping)} that build the {theirs} job's model" if shaping else ""))
    differ = other_model_flags(model_dir, settings)
    if differ:
        return (f"it was trained with {' '.join(differ)} (its {training_record.PROGRESS_FILE}): pass "
                f"{'those' if len(differ) > 1 else 'that'}, on data of the same classes")
    if not shaping:
        return "pass the model dir of a run of this model"
    listed = shaping[0] if len(shaping) == 1 else f"{', '.join(shaping[:-1])} and {shaping[-1]}"
    return f"pass the {listed} it was trained with, on data of the same classes"


def _a(word):
    return f"{'an' if word[:1] in 'aeiou' else 'a'} {word}"


def other_model_flags(model_dir, settings=None):
    """Returns the flags that shaped the model of the run in `model_dir`, as its training record keeps them,
    where they differ from this run's `settings` (None: all; a flag this job has not is left out):
    ['--model vgg16', ...]; [] where none is recorded (a job without those flags, no record) or all are the
    same."""
    newest = training_record.newest_run(model_dir)
    return [f"--{flag} {newest[key]}" for flag, key in (("model", "model"), ("image-size", "image_size"))
            if newest.get(key) is not None and (settings is None or hasattr(settings, key))
            and newest.get(key) != getattr(settings, key, None)]


def _misfits(weights, keys, shapes):
    """Returns ['it has no conv/kernel', 'head/kernel is (64, 5) there, (64, 3) here', ...]: each of `weights`
    whose key (in `keys`, in order) a checkpoint of `shapes` ({key: shape}) lacks or holds in another shape."""
    problems = []
    for weight, key in zip(weights, keys):
        if key not in shapes:
            problems.append(f"it has no {variable_name(weight)}")
        elif tuple(shapes[key]) != tuple(weight.shape):
            problems.append(f"{variable_name(weight)} is {tuple(shapes[key])} there, {tuple(weight.shape)} here")
    return problems


def _object_keys(keras_model):
    """Returns {id(variable): its key in an object-based checkpoint of `keras_model`} for its weights: the
    keys model_to_estimator's savers give them, by their place in the model (layer_with_weights-N/...)."""
    saveables = graph_view.ObjectGraphView(keras_model).frozen_saveable_objects()
    return {id(unwrapped(s.op)): s.specs[0].name for s in saveables if isinstance(s.op, tf.Variable)}


def _layer_keys(shapes):
    """Returns the keys of an object-based checkpoint's layer weights (not the optimizer's, not shadows)."""
    return [key for key in shapes if key.startswith(_LAYER_KEY_PREFIX) and key.endswith(_VALUE_SUFFIX)
            and ".OPTIMIZER_SLOT" not in key]


def _named_weight_keys(shapes):
    """Returns the keys of a name-based checkpoint's model weights: not the optimizer's (model_to_estimator
    names them training/<optimizer>/...), the global step or shadows."""
    return [key for key in shapes if not key.startswith(("training/", SHADOW_PREFIX)) and key != "global_step"]


def check_same_model(init_from, settings):
    """Raises FlagError (exit 2) when the run in `init_from` recorded another --model than `settings` build:
    its checkpoint cannot fit (said before the run's header; load() finds the misfits of other shapes)."""
    theirs = training_record.newest_run(init_from).get("model")
    ours = getattr(settings, "model", None)
    if theirs and ours and theirs != ours:
        raise FlagError(f"--init-from {init_from} was trained with --model {theirs} (its "
                        f"{training_record.PROGRESS_FILE}), and this run builds --model {ours}, which its weights "
                        f"cannot fit; pass --model {theirs}, or another run's model dir")


def recorded_classes(model_dir):
    """Returns the class names (in label order) the results.json of the run in `model_dir` records, or None
    (a job of fixed classes, or a run that did not finish)."""
    try:
        return json.loads(storage.read_text(storage.join(model_dir, RESULTS_FILE))).get("class_names")
    except (OSError, ValueError, AttributeError):
        return None


def check_same_classes(init_from, theirs, ours):
    """Raises FlagError (exit 2) when the run in `init_from` was trained on other classes (`theirs`, as its
    records name them in label order) than this run's data has (`ours`): its head would score each image as
    another class. Where either is None (nothing recorded, or a job of fixed classes) it passes."""
    if theirs and ours and list(theirs) != list(ours):
        raise FlagError(f"--init-from {init_from} was trained on the classes {', '.join(theirs)}, and this run's "
                        f"data has {', '.join(ours)} (in label order); pass a run trained on these classes")


def resume_warning(settings, segments, start_step) -> Optional[str]:
    """Returns one line when --init-from is given to a model dir with checkpoints (`start_step` > 0) and names
    another folder than the one its first run started from (`segments`, the training record's): it is not
    read."""
    if not getattr(settings, "init_from", None) or not start_step:
        return None
    first = started_from(segments)
    if first and first["model_dir"] == storage.absolute(settings.init_from):
        return None
    started = f"it started from {first['checkpoint']}" if first else "its first run started without --init-from"
    return (f"--init-from {settings.init_from} is not read: {settings.model_dir} holds checkpoints (to step "
            f"{start_step}), which it goes on from ({started}); pass another --model-dir to start a new run from it")


def started_from(segments):
    """Returns the --init-from record (InitialWeights.as_record) of a model dir's first run, from its training
    record's `segments`, or None (it started from scratch, or its first run is no longer on record)."""
    return segments[0].init_from if segments and segments[0].start_step == 0 else None
