"""The model dir: one run at a time, what interrupted runs leave behind, and which
checkpoint a run can resume from."""
import contextlib
import json
import logging
import os
import re
import shutil

import numpy as np
import tensorflow as tf
from google.protobuf import text_format
from tensorflow.python.training import checkpoint_state_pb2  # (not in TF 2.15's public API)

from acquisition import locks, storage
from pipeline.errors import UsageError
from pipeline.training_record import PROGRESS_FILE

log = logging.getLogger(__name__)
LOCK_FILE = ".run.lock"
WARM_START_LOCK_FILE = ".warm_start.lock"
# Each names its last holder's process and holds no data (on a URL: a locks.Lease, JSON).
LOCK_FILES = (LOCK_FILE, WARM_START_LOCK_FILE)
KERAS_DIR = "keras"  # model_to_estimator's first checkpoint: the weights a new model dir starts from
FIRST_WEIGHTS_RECORD = "first_weights.json"  # in keras/: what decided them (see first_weights)
# What a kill leaves under a temporary name, by folder (a glob below the model dir; "" is the model dir itself)
# and by the exact form of the name, so that a file of yours that only looks temporary (notes.tmp1,
# photos_temp/) is never taken for one: TensorFlow's (a Saver's sharded save, files written then renamed, a
# checkpoint's data before its rename, exports) and ours (acquisition.storage.write_atomically: results,
# reports, TFLite files; the best checkpoint's copy).
_SAVE_FOLDER = r".*ckpt(-\d+)?_temp(_[0-9a-f]+)?"  # <prefix>_temp/part-*: saver.py's _SHARDED_SUFFIX
_RENAMED_FILE = r".+\.tmp[0-9a-f]{32}"  # file_io.atomic_write_string_to_file: name + ".tmp" + uuid4().hex
_DATA_BEFORE_RENAME = r".+\.tempstate\d+"  # tensor_bundle: data + ".tempstate" + a random 64-bit number
_OURS = r"\.tmp-.+-[a-z0-9_]{8}"  # storage.write_atomically: mkstemp's 8 characters, or 8 hex on a URL
LEFTOVERS = {"": (_SAVE_FOLDER, _RENAMED_FILE, _DATA_BEFORE_RENAME, _OURS),
             KERAS_DIR: (_SAVE_FOLDER, _RENAMED_FILE, _DATA_BEFORE_RENAME),
             "*": (_OURS,),
             "export": (r"temp-\d+",),  # the Estimator's export, before its rename to <timestamp>
             "export/tflite/*": (_OURS,),
             "eval_only/export": (r"temp-\d+",),  # an --eval-only run's (evaluation_report.EVAL_ONLY_DIR)
             "eval_only/export/tflite/*": (_OURS,),
             "best": (r".+\.tmp",)}  # pipeline.validation.best's copy
_CHECKPOINT = re.compile(r"^(?P<prefix>.*-(?P<step>\d+))\.(index|data-\d+-of-\d+)$")
_CHECKPOINT_FILE = re.compile(r"^(?P<prefix>.*-(?P<step>\d+))\.(index|meta|data-\d+-of-\d+)$")


def remove_worker_scratch(model_dir, task_type, index):
    """Removes the folder in which a multi_worker_mirrored task that is not the chief writes its summaries and
    checkpoints (tmp_<type>_<index>: TensorFlow's MonitoredTrainingSession runs every save op on every worker,
    for their collectives, and points the others' there); they are copies of the chief's. Returns None."""
    storage.remove_tree(storage.join(model_dir, f"tmp_{task_type}_{index}"))


@contextlib.contextmanager
def locked(model_dir):
    """Holds the model dir's lock for the duration of the block: one run per model dir.

    Raises UsageError naming the running process when another run holds it. A
    lock left by a process that died is taken over (the kernel releases it). On a
    URL the lock is a locks.Lease, taken over once its owner stops renewing it. A
    run that fails having written nothing but its lock into a local folder that was
    there before (yours: --eval-only of an empty one, say) takes its lock file away.
    """
    path = storage.join(model_dir, LOCK_FILE)
    lease = locks.Lease(path) if storage.is_url(model_dir) else None
    before = None if lease or os.path.lexists(path) or not os.path.isdir(model_dir) else set(os.listdir(model_dir))
    try:
        held = lease.acquire() if lease else _acquire_in(model_dir, path)
    except locks.LockHeld as e:
        wait = f"wait for it to finish (or, if it is gone, {lease.ttl:.0f} s for its lease to expire)" if lease \
            else "wait for it to finish"
        raise UsageError(f"another run ({e.owner}) is using the model dir {model_dir}; {wait}, or pass "
                         "another --model-dir") from None
    try:
        yield
    except BaseException:
        if before is not None and set(os.listdir(model_dir)) - before <= {LOCK_FILE}:
            locks.release_and_remove(held, path)
            held = None
        raise
    finally:
        if lease:
            lease.release()
        elif held is not None:
            locks.release(held)


def run_holding(model_dir):
    """Returns who holds the lock of the model dir `model_dir` ("pid N on HOST"; a URL's lease holder), or None
    when no run does; the lock is only read."""
    path = storage.join(model_dir, LOCK_FILE)
    return locks.Lease(path).holder() if storage.is_url(model_dir) else locks.held_by(path)


def lock_taken_at(model_dir):
    """Returns when the lock of `model_dir` was last taken (its file's modification time, seconds since the epoch,
    as its file system's clock says), or None when it has no lock file."""
    try:
        return tf.io.gfile.stat(storage.join(model_dir, LOCK_FILE)).mtime_nsec / 1e9
    except tf.errors.NotFoundError:
        return None


def _acquire_in(model_dir, path):
    try:
        return locks.acquire(path)
    except FileNotFoundError:  # a run that failed there removed the folder it made (removed_if_left_empty)
        os.makedirs(model_dir, exist_ok=True)
        return locks.acquire(path)


@contextlib.contextmanager
def removed_if_left_empty(model_dir, made):
    """Removes the local folder `model_dir` when the block raises, this run made it (`made`: the outermost
    folder it made, `model_dir` or a parent, which go too) and it holds nothing but its lock files and first
    weights (_removed_if_empty): a run that failed on its data leaves no folder behind. The folder is removed
    under its lock (see locks.release_and_remove), so a run that took the lock meanwhile keeps it."""
    try:
        yield
    except BaseException:
        if made and _removed_if_empty(model_dir):
            folder = os.path.abspath(model_dir)
            while folder != made and folder != os.path.dirname(folder):  # the parents it made, innermost first
                folder = os.path.dirname(folder)
                try:
                    os.rmdir(folder)
                except OSError:
                    break
        raise


def _removed_if_empty(model_dir):
    """Returns whether `model_dir`, holding nothing but its free lock files and perhaps the first weights
    (KERAS_DIR: made again by any run, a stop in graph building leaves them), was removed."""
    path = os.path.join(model_dir, LOCK_FILE)
    try:
        if not _left_empty(model_dir):
            return False
        held = locks.acquire(path)
    except (OSError, locks.LockHeld):
        return False
    if not _left_empty(model_dir):
        locks.release(held)
        return False
    warm_start, warming = os.path.join(model_dir, WARM_START_LOCK_FILE), None
    if os.path.exists(warm_start):
        try:  # a cluster's worker may still be writing the first weights under it
            warming = locks.acquire(warm_start)
        except (OSError, locks.LockHeld):
            locks.release(held)
            return False
    shutil.rmtree(os.path.join(model_dir, KERAS_DIR), ignore_errors=True)
    for name in _written_first(set(os.listdir(model_dir))):
        os.remove(os.path.join(model_dir, name))
    if warming is not None:
        locks.release_and_remove(warming, warm_start)
    locks.release_and_remove(held, path)
    try:
        os.rmdir(model_dir)
    except OSError:
        return False
    return True


def _left_empty(model_dir):
    """Returns whether `model_dir` holds nothing but lock files (its run lock, or none: see locked), the first
    weights, and what a run writes before its first checkpoint: its training record and TensorBoard's first
    event files (a cluster whose tasks never met, a port in use)."""
    names = set(os.listdir(model_dir))
    return names - _written_first(names) <= {*LOCK_FILES, KERAS_DIR}


def _written_first(names):
    """Returns those of `names` that a run writes before its first checkpoint (its record, event files)."""
    return {n for n in names if n == PROGRESS_FILE or n.startswith("events.out.tfevents.")}


@contextlib.contextmanager
def warm_start_lock(model_dir):
    """Holds, waiting for it, the lock under which an Estimator is built on `model_dir`.

    model_to_estimator writes the model's first weights to keras/keras_model.ckpt
    when that folder holds no checkpoint, and in a cluster every task builds its
    Estimator on the same model dir, each a chief in its RunConfig's eyes at that
    point (tensorflow_estimator 2.15, keras_lib._save_first_checkpoint; the
    distribute coordinator only sets is_chief later). Unlocked, two tasks wrote that
    checkpoint at once and one's MergeV2Checkpoints failed. Under the lock the first
    task writes it and the others warm-start from it. A URL's file system has no
    flock: there the lock is a locks.Lease the tasks wait for (see its guarantee). No
    model dir (None: a temporary folder of TensorFlow's own) is no one else's: no lock.
    """
    if not model_dir:
        yield
        return
    path = storage.join(model_dir, WARM_START_LOCK_FILE)
    if storage.is_url(model_dir):
        storage.makedirs(model_dir)
        lease = locks.Lease(path).acquire(wait=True)
        try:
            yield
        finally:
            lease.release()
        return
    os.makedirs(model_dir, exist_ok=True)
    with locks.exclusive(path):
        yield


@contextlib.contextmanager
def first_weights(model_dir, origin_of):
    """Holds warm_start_lock while model_to_estimator is built on `model_dir`, and makes keras/ (the first
    weights a model dir without a checkpoint warm-starts from) those of the origin `origin_of()` returns, a
    JSON dict naming what decides them (pipeline.estimator.weights_origin), the same in every task of a
    launch. `origin_of` is called only for a model dir without a checkpoint: a resume reads no weights file.

    model_to_estimator writes keras/ only where it holds no checkpoint, so a start stopped before its first
    checkpoint would decide the weights of the next, whatever its flags (another --init-from, --weights or
    --seed). Before the block, keras/ in a model dir without a checkpoint (as the Estimator tells: no
    `checkpoint` file naming one, the test its warm start makes) is removed unless its first_weights.json
    names that origin and its checkpoint reads back whole; after it, the keras/ written under the lock is
    recorded with it. In a cluster the first task of a launch writes keras/ and the others, finding
    their own origin, start from it. A model dir with a checkpoint resumes from it: its keras/ is left as
    it is.
    """
    with warm_start_lock(model_dir):
        if not model_dir:
            yield
            return
        new = tf.train.latest_checkpoint(model_dir) is None
        if not new:  # it resumes from its checkpoint: keras/ is left as it is
            yield
            return
        keras_dir, origin = storage.join(model_dir, KERAS_DIR), json.loads(json.dumps(origin_of()))
        record = storage.join(keras_dir, FIRST_WEIGHTS_RECORD)
        if storage.isdir(keras_dir):
            problem = _first_weights_problem(keras_dir, record, origin)
            if problem:
                if storage.exists(record):  # first: a removal cut short leaves no record, so the next removes again
                    storage.remove(record)
                storage.remove_tree(keras_dir)
                log.info("removed %s, the first weights a start stopped before its first checkpoint left: %s",
                         keras_dir, problem)
        yield
        if storage.isdir(keras_dir) and not storage.exists(record):
            storage.write_atomically(record, json.dumps(origin, indent=1, sort_keys=True) + "\n")


def _first_weights_problem(keras_dir, record, origin):
    """Returns why keras/ is not this run's first weights (see first_weights), or None."""
    recorded = _recorded_origin(record)
    if recorded is None:
        return f"{FIRST_WEIGHTS_RECORD} is missing or damaged, so what made them is not known"
    if recorded != origin:
        differ = sorted(key for key in set(recorded) | set(origin) if recorded.get(key) != origin.get(key))
        return f"they were made with another {', '.join(differ)} than this run's"
    prefix = tf.train.latest_checkpoint(keras_dir)
    problem = checkpoint_problem(prefix) if prefix else "no checkpoint is recorded there"
    return f"they cannot be read ({problem})" if problem else None


def _recorded_origin(record):
    """Returns the origin keras/first_weights.json holds, or None where there is none that reads."""
    try:
        return json.loads(storage.read_text(record))
    except (OSError, ValueError):
        return None


def remove_leftovers(model_dir):
    """Removes what interrupted runs leave (LEFTOVERS, each by the exact form of its name): half-written
    checkpoint folders (`model.ckpt-N_temp`), files TensorFlow writes under a temporary name (`*.tmp<32 hex>`,
    in keras/ too), export folders (`export/temp-<digits>`), temporary results, report and TFLite files, a
    best checkpoint's files cut short while copied (`best/*.tmp`) and checkpoints whose save was cut short
    (see the functions called); returns the paths removed."""
    found = [storage.join(folder, name) for below, names in LEFTOVERS.items()
             for folder in (storage.glob(storage.join(model_dir, *below.split("/"))) if below else [model_dir])
             if storage.isdir(folder)
             for name in storage.listdir(folder) if any(re.fullmatch(form, name) for form in names)]
    if storage.is_url(model_dir):  # exports cut short while being copied there (see serving.export)
        from serving.export import is_complete
        found += [path for path in storage.glob(storage.join(model_dir, "export", "[0-9]*")) if not is_complete(path)]
    found += rotated_out_checkpoint_files(model_dir)
    found += forget_checkpoint_cut_before_its_meta_graph(model_dir)
    found += checkpoint_cut_before_it_was_recorded(model_dir)
    found = sorted(set(found))
    for path in found:
        storage.remove_tree(path)
    if found:
        log.info("removed what an interrupted run left: %s", ", ".join(found))
    return found


def rotated_out_checkpoint_files(model_dir):
    """Returns the files of checkpoints older than the newest that the `checkpoint` file no longer lists:
    TensorFlow's Saver drops the oldest from that list, writes it, then deletes the dropped one's files,
    so a kill in between leaves them (or some of them) behind, for no later run to rotate out."""
    state = tf.train.get_checkpoint_state(model_dir)
    newest = _newest_recorded_step(state)
    if newest is None:
        return []
    listed = {os.path.basename(p) for p in state.all_model_checkpoint_paths} | {
        os.path.basename(state.model_checkpoint_path)}
    return [path for prefix, (step, files) in _checkpoint_files(model_dir).items()
            if prefix not in listed and step < newest for path in files]


def forget_checkpoint_cut_before_its_meta_graph(model_dir):
    """Returns the files of the newest checkpoint when its save was cut short before its meta graph,
    after pointing the `checkpoint` file at the one before, which the run then resumes from.

    TensorFlow's Saver writes the data and index, then the `checkpoint` file, then `<prefix>.meta`:
    a kill in between leaves the newest checkpoint without the .meta its older ones have. Restorable
    as it is, it would stay the one checkpoint of the run without its graph; forgotten, its steps
    are trained again, as after a kill just before that save.
    """
    state = tf.train.get_checkpoint_state(model_dir)
    newest = state and state.model_checkpoint_path
    older = [p for p in (state.all_model_checkpoint_paths if state else []) if p != newest]
    if not newest or storage.exists(newest + ".meta") or not any(storage.exists(p + ".meta") for p in older):
        return []
    write_checkpoint_state(model_dir, older)
    name = os.path.basename(newest)
    return [storage.join(model_dir, f) for f in storage.listdir(model_dir) if f.startswith(name + ".")]


def checkpoint_cut_before_it_was_recorded(model_dir):
    """Returns the files of checkpoints whose save was cut short before the `checkpoint` file named them.

    TensorFlow's Saver renames a checkpoint's data files into place, then writes its index in place
    (MergeV2Checkpoints: a kill leaves it empty or cut short), then the `checkpoint` file: the files of
    a checkpoint newer than the newest that file names are such a save's, whether they read back or
    not. With no `checkpoint` file (the run's first save cut short), those that do not read back.
    """
    newest = _newest_recorded_step(tf.train.get_checkpoint_state(model_dir))
    return [path for prefix, (step, files) in _checkpoint_files(model_dir).items()
            if (step > newest if newest is not None else checkpoint_problem(storage.join(model_dir, prefix)))
            for path in files]


def write_checkpoint_state(model_dir, checkpoints):
    """Writes the `checkpoint` file of `model_dir` naming `checkpoints` (prefixes, oldest first; the last is the
    one a run resumes from) by their names alone, as the Estimator's Savers write them. Not through
    update_checkpoint_state: given a relative model dir, it names them relative to the working directory
    ('../../model.ckpt-23'), and TensorFlow then finds none of them."""
    names = [os.path.basename(p) for p in checkpoints]
    state = checkpoint_state_pb2.CheckpointState(model_checkpoint_path=names[-1], all_model_checkpoint_paths=names)
    storage.write_atomically(storage.join(model_dir, "checkpoint"), text_format.MessageToString(state))


def _newest_recorded_step(state):
    """Returns the step of the newest checkpoint the `checkpoint` file's `state` names, or None."""
    return step_of_checkpoint(state.model_checkpoint_path) if state else None


def step_of_checkpoint(prefix):
    """Returns the global step a checkpoint `prefix` (model.ckpt-<step>) names, or None."""
    match = re.search(r"-(\d+)$", prefix or "")
    return int(match.group(1)) if match else None


def _checkpoint_files(model_dir):
    """Returns {prefix: (global step, [its files: index, data, meta])} of the checkpoints in `model_dir`."""
    found = {}
    for name in storage.listdir(model_dir):
        match = _CHECKPOINT_FILE.match(name)
        if match:
            found.setdefault(match.group("prefix"), (int(match.group("step")), []))[1].append(
                storage.join(model_dir, name))
    return found


def latest_global_step(model_dir):
    """Returns the global step of the newest checkpoint in `model_dir`, or 0 if there is none."""
    return step_of_checkpoint(tf.train.latest_checkpoint(model_dir)) or 0


def read_checkpoint(prefix):
    """Returns a reader of the checkpoint `prefix`. Not tf.train.load_checkpoint: where the file system
    calls a prefix a folder (ram://, TF 2.15) it looks for a checkpoint inside it and finds none."""
    return tf.compat.v1.train.NewCheckpointReader(prefix)


def checkpoint_problem(prefix, finite=False):
    """Returns why the checkpoint `prefix` cannot be restored (missing, truncated, damaged
    file; with `finite`, NaN or infinite values), or None when every tensor in it reads back
    with a matching checksum."""
    try:
        reader = read_checkpoint(prefix)
        for name, dtype in reader.get_variable_to_dtype_map().items():
            value = reader.get_tensor(name)
            if finite and dtype.is_floating and not np.isfinite(value).all():
                return f"it holds NaN or infinite values ({name})"
    except (tf.errors.OpError, ValueError, IndexError) as e:  # IndexError: a data file cut short
        lines = (getattr(e, "message", None) or str(e)).strip().splitlines()
        return lines[0] if lines else "a data file is cut short"  # (ram://'s IndexError says nothing)
    return None


def check_fits(model_dir, keras_model):
    """Raises UsageError when the latest checkpoint in `model_dir` holds layer weights of other
    shapes than `keras_model`'s (it was trained with other flags, such as another image size)."""
    checkpoint = tf.train.latest_checkpoint(model_dir)
    if not checkpoint:
        return
    shapes = read_checkpoint(checkpoint).get_variable_to_shape_map()
    if any(name.startswith("layer_with_weights-") for name in shapes):  # object-based: by layer position
        saved = sorted(tuple(shape) for name, shape in shapes.items() if name.startswith("layer_with_weights-")
                       and "OPTIMIZER_SLOT" not in name and name.endswith("/.ATTRIBUTES/VARIABLE_VALUE"))
    else:  # name-based (pipeline.estimator.checkpoint_format, models with BatchNorm): by variable name
        names = (weight.name.split(":")[0] for weight in keras_model.weights)
        saved = sorted(tuple(shapes[name]) for name in names if name in shapes)
    wanted = sorted(tuple(weight.shape) for weight in keras_model.weights)
    if saved != wanted:
        difference = sorted(set(saved) ^ set(wanted))[:2]
        raise UsageError(f"the checkpoint {os.path.basename(checkpoint)} in {model_dir} does not fit the model these "
                         f"flags build (weight shapes {', '.join(map(str, difference))} differ); resume with the "
                         "flags it was trained with (the same --image-size, say), or pass another --model-dir")


def candidate_checkpoints(model_dir):
    """Returns the checkpoint prefixes in `model_dir`, newest (highest step) first: those the
    `checkpoint` file lists and those whose files are on disk."""
    prefixes = {}
    state = tf.train.get_checkpoint_state(model_dir)
    if state:
        # get_checkpoint_state has already joined relative paths to model_dir (itself maybe relative); a state
        # naming another folder was pointed here first (point_state_here, in restorable_checkpoint).
        for path in list(state.all_model_checkpoint_paths) + [state.model_checkpoint_path]:
            step = step_of_checkpoint(path)
            if step is not None:
                prefixes[path] = step
    for name in storage.listdir(model_dir):
        match = _CHECKPOINT.match(name)
        if match:
            prefixes[storage.join(model_dir, match.group("prefix"))] = int(match.group("step"))
    return sorted(prefixes, key=prefixes.get, reverse=True)


def point_state_here(model_dir):
    """Rewrites the `checkpoint` file of `model_dir` with its checkpoints' names alone when it names them
    in another folder: the absolute paths Savers wrote before relative ones (pipeline.estimator), in a
    model dir since moved or copied. TensorFlow would find no checkpoint there and train from step 0."""
    state = tf.train.get_checkpoint_state(model_dir)
    if not state:
        return
    here = storage.absolute(model_dir)
    paths = list(state.all_model_checkpoint_paths)
    if all(storage.absolute(os.path.dirname(p)) == here for p in paths + [state.model_checkpoint_path]):
        return
    log.warning("%s's checkpoint file names checkpoints in %s: the model dir was moved or copied; it now names "
                "those here", model_dir, os.path.dirname(state.model_checkpoint_path))
    newest = state.model_checkpoint_path  # the one a run resumes from: last, as TensorFlow lists it
    write_checkpoint_state(model_dir, [p for p in paths if p != newest] + [newest])


def restorable_checkpoint(model_dir):
    """Makes the newest checkpoint that reads back whole the one a run resumes from; returns
    its prefix, or None when there is no checkpoint at all.

    Newer damaged ones (a truncated data file from a full disk, a flipped byte, a
    missing index) are renamed `<file>.damaged` and named in a warning, and the
    `checkpoint` file is rewritten to point at the one kept, as it is when it is missing, damaged or names
    another (TensorFlow would start from step 0). Raises UsageError when checkpoints exist but none can be
    read.
    """
    point_state_here(model_dir)
    skipped = []
    candidates = candidate_checkpoints(model_dir)
    for prefix in candidates:
        problem = checkpoint_problem(prefix)
        if problem is None:
            if skipped:
                _set_aside(model_dir, prefix, skipped)
            elif not _resumes_from(model_dir, prefix):
                log.warning("%s's checkpoint file is missing or damaged, or names no checkpoint there: it now names "
                            "%s, the newest that reads back, which a run resumes from", model_dir,
                            os.path.basename(prefix))
                write_checkpoint_state(model_dir, candidates[candidates.index(prefix):][::-1])
            return prefix
        skipped.append((prefix, problem))
    if skipped:
        raise UsageError(
            f"no checkpoint in {model_dir} can be read ({'; '.join(f'{os.path.basename(p)}: {why}' for p, why in skipped)}); "
            "move them away to train from scratch, or pass another --model-dir")
    return None


def _resumes_from(model_dir, prefix):
    """Returns whether TensorFlow, reading the `checkpoint` file, resumes `model_dir` from `prefix`."""
    latest = tf.train.latest_checkpoint(model_dir)
    return latest is not None and os.path.basename(latest) == os.path.basename(prefix)


def set_aside_diverged(model_dir, nan_step):
    """After a NaN loss at global step `nan_step`: renames `*.damaged` the checkpoints of the
    weights that gave it (step nan_step - 1) and later, and older ones holding NaN or
    infinite values (Adam's moments overflow before the loss does); the newest checkpoint
    left, all finite, becomes the one a run resumes from. Returns its prefix, or None."""
    bad, kept = [], None
    for prefix in candidate_checkpoints(model_dir):
        step = int(prefix.rsplit("-", 1)[1])
        if step >= nan_step - 1:
            bad.append((prefix, f"its weights give the NaN loss of step {nan_step}" if step == nan_step - 1
                        else "saved after the loss diverged"))
            continue
        problem = checkpoint_problem(prefix, finite=True)
        if problem is None:
            kept = prefix
            break
        bad.append((prefix, problem))
    if bad:
        _set_aside(model_dir, kept, bad)
    return kept


def _set_aside(model_dir, kept, skipped):
    for prefix, problem in skipped:
        folder, name = prefix.rsplit("/", 1) if storage.is_url(prefix) else os.path.split(prefix)
        for file in storage.listdir(folder or "."):
            if file.startswith(name + ".") and not file.endswith(".damaged"):
                storage.rename(storage.join(folder, file), storage.join(folder, file + ".damaged"))
        log.warning("checkpoint %s is set aside (%s): its files are renamed *.damaged; a run resumes from %s",
                    os.path.basename(prefix), problem, os.path.basename(kept) if kept else "scratch")
    if kept is None:
        storage.rename(storage.join(model_dir, "checkpoint"), storage.join(model_dir, "checkpoint.damaged"))
        return
    state = tf.train.get_checkpoint_state(model_dir)
    damaged = {os.path.basename(p) for p, _ in skipped}
    kept_names = [os.path.basename(p) for p in (state.all_model_checkpoint_paths if state else [])
                  if os.path.basename(p) not in damaged]
    write_checkpoint_state(model_dir, kept_names or [kept])
