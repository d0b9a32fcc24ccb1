"""The client side: loading an exported model and classifying image files (and, for an export that
takes them, raw pixel files) with it, in batches."""
import errno
import os
import sys
import time

import numpy as np
import tensorflow as tf

from acquisition.image_formats import NOT_AN_IMAGE, check_image, describe_unread, is_image_name, unread_images
from acquisition.png_text import png_text
from input_fns.decode import PIXELS_SIGNATURE, decodes_reduced, forbidden_views
from serving import ExportNotFoundError
from acquisition import storage
from reporting.compare import RESULTS_FILE
from serving.export import CLASS_NAME, CLASS_NAMES_FILE, PROBABILITIES, SOURCE_FILE, is_whole, newest_export, \
    read_class_names
from serving.predictor import Predictor, check_class_count
from serving.tflite import load_tflite_predictor

BATCH_SIZE = 64  # files read and classified at once: memory stays flat however many are given
# A file of one image's raw uint8 pixels, row by row (channels interleaved), nothing else: for an
# export with a pixels signature (a Fashion-MNIST image's 784 bytes, as in its IDX files).
PIXELS_EXTENSION = ".gray"


def resolve_export_dir(path):
    """Returns the SavedModel folder at `path`, or the newest one among its timestamped subfolders, or,
    for a model dir, the newest in its export/ (where a run exports its best, or its last, model). On a
    URL, exports still being copied (without their completion marker) are passed over."""
    if is_whole(path):
        return path
    newest = newest_export(path)
    if not newest and storage.isdir(storage.join(path, "export")):
        return resolve_export_dir(storage.join(path, "export"))
    if not newest:
        lite = sorted(storage.glob(storage.join(path, "*.tflite")) + storage.glob(storage.join(path, "*", "*.tflite")))
        if lite:
            raise ExportNotFoundError(f"{path} holds TFLite files, not a SavedModel: pass one of them to --model, "
                                      f"e.g. {lite[-1]}")
        if storage.isfile(storage.join(path, "checkpoint")) or storage.glob(storage.join(path, "model.ckpt-*.index")):
            raise ExportNotFoundError(f"{path} holds a run that has exported no model yet (it exports at its first "
                                      "validation, or at its end without one); wait for it, or run its training "
                                      "command again to go on")
        raise ExportNotFoundError(f"no exported model at {path}: pass --model with a training run's model dir or "
                                  "the export folder it printed (<model dir>/export/<timestamp>)")
    return newest


def load_predictor(path):
    """Returns the Predictor of the SavedModel at `path` (see resolve_export_dir), or of the TFLite file
    at `path` when it ends in .tflite (see serving.tflite.load_tflite_predictor)."""
    if path.lower().endswith(".tflite"):  # issue 33: a model converted for devices (--tflite)
        return load_tflite_predictor(path)
    return load_newest_export(path, _saved_model_predictor)


def load_newest_export(path, load):
    """Returns load(export_dir) of the export `path` names (see resolve_export_dir). When that export is gone
    once its load failed (a run training there replaced it with its new best), returns load() of the newest."""
    export_dir = resolve_export_dir(path)
    try:
        return load(export_dir)
    except (ExportNotFoundError, OSError, tf.errors.OpError):
        if export_dir == path or storage.exists(export_dir):
            raise
        return load(resolve_export_dir(path))


def _saved_model_predictor(export_dir):
    """Returns the Predictor of the export at `export_dir`. Raises ExportNotFoundError for one copied in part,
    damaged or made elsewhere."""
    names_path = storage.join(export_dir, "assets.extra", CLASS_NAMES_FILE)
    missing = [name for name in (storage.join("variables", "variables.index"), storage.join("assets.extra", CLASS_NAMES_FILE))
               if not storage.isfile(storage.join(export_dir, name))]
    if missing:
        raise ExportNotFoundError(f"the export {export_dir} lacks {' and '.join(missing)}: it was copied in part; "
                                  "copy the whole export folder again (or pass the model dir that made it)")
    try:
        signatures = tf.saved_model.load(export_dir).signatures
    except tf.errors.OpError as e:  # (the variables' data cut short or damaged, say)
        raise ExportNotFoundError(f"the export {export_dir} cannot be loaded ({storage.op_error_line(e)}): it was "
                                  "copied in part or is damaged; copy the whole export folder again (or pass the "
                                  "model dir that made it)") from None
    class_names = read_class_names(names_path)
    # serving_default takes file contents: 'jpeg_bytes' (the OCT job) or 'image_bytes' (the others)
    _check_exported_here(signatures, export_dir)
    outputs = signatures["serving_default"].structured_outputs
    probabilities = outputs[PROBABILITIES] if PROBABILITIES in outputs else next(iter(outputs.values()))
    check_class_count(class_names, int(probabilities.shape[-1]), names_path, export_dir)
    predictor = Predictor(export_dir, class_names, _classifier(signatures["serving_default"], class_names))
    predictor.fast_decode = decodes_reduced(storage.join(export_dir, "assets.extra"))
    predictor.forbidden_views = forbidden_views(storage.join(export_dir, "assets.extra"))
    if PIXELS_SIGNATURE in signatures:
        pixels = signatures[PIXELS_SIGNATURE]
        predictor.pixels_shape = tuple(_input_spec(pixels)[1].shape[1:])
        predictor.classify_pixels = _classifier(pixels, class_names)
    return predictor


def unfinished_run_note(path, export_dir):
    """Returns the line telling that `path` (--model) is the model dir of a run that has not finished (a
    checkpoint and no results.json: stopped, killed or still training), whose `export_dir` was made mid-run,
    from the checkpoint it names; None for an export, a .tflite file and a finished run's model dir."""
    if not storage.isfile(storage.join(path, "checkpoint")) or storage.exists(storage.join(path, RESULTS_FILE)):
        return None
    try:
        source = storage.read_text(storage.join(export_dir, "assets.extra", SOURCE_FILE)).split()[0]
    except (OSError, IndexError):
        source = "a checkpoint"
    return (f"{path} holds a run that has not finished training (no {RESULTS_FILE}: stopped, killed or still "
            f"running): these answers come from its export of {source}, made while it trained; run its training "
            "command again to finish it")


def _check_exported_here(signatures, export_dir):
    """Raises ExportNotFoundError unless the loaded `signatures` of `export_dir` have a serving_default that takes
    one batch of file contents (strings), as the exports of the runs here do."""
    default = signatures.get("serving_default")
    inputs = default.structured_input_signature[1] if default is not None else {}
    if len(inputs) == 1 and next(iter(inputs.values())).dtype == tf.string:
        return
    takes = ", ".join(f"{n} ({spec.dtype.name})" for n, spec in inputs.items()) or "nothing"
    raise ExportNotFoundError(f"{export_dir} is not an export a run here made: its serving_default signature takes "
                              f"{takes}, not image files' contents; pass the export of a training run (or its model "
                              "dir)" if default is not None else
                              f"{export_dir} has no serving_default signature, so it is not an export a run here "
                              "made; pass the export of a training run (or its model dir)")


def _input_spec(signature):
    """Returns (name, TensorSpec) of the one input of a loaded signature."""
    ((name, spec),) = signature.structured_input_signature[1].items()
    return name, spec


def _classifier(signature, class_names):
    """Returns a function from a batch of `signature`'s one input to (probabilities [n, classes], the
    predicted class names [n])."""
    name, spec = _input_spec(signature)

    def classify(batch):
        outputs = signature(**{name: tf.constant(batch, spec.dtype)})
        if CLASS_NAME not in outputs:  # exported before the signature named the classes
            probabilities = next(iter(outputs.values())).numpy()
            return probabilities, [class_names[i] for i in probabilities.argmax(axis=-1)]
        return outputs[PROBABILITIES].numpy(), [n.decode() for n in outputs[CLASS_NAME].numpy()]

    return classify


def is_pixels_name(name):
    """Returns whether a file named `name` is taken for raw pixels: it ends in PIXELS_EXTENSION (any case; a hidden
    one too, given by name: a folder's walk leaves hidden files out)."""
    return os.path.basename(name).lower().endswith(PIXELS_EXTENSION)


def _why_not_a_file(path):
    """Returns the error of a path that is not a file to read: a broken or looping link, one that cannot be
    reached, something else than a file, or nothing, with where a relative path was looked for."""
    if storage.isdir(path):
        return ("a folder without images (JPEG, PNG, BMP or GIF files, or raw .gray pixels, at any depth); pass a "
                "folder that holds some, or the image files")
    if not storage.is_url(path) and os.path.lexists(path):
        try:
            os.stat(path)
        except OSError as e:
            fix = "point it at an image, or pass the image itself"
            if e.errno == errno.ELOOP:
                return f"a symbolic link that loops (too many levels of links); {fix}"
            if e.errno == errno.ENOENT and os.path.islink(path):
                return f"a symbolic link that leads to {os.readlink(path)}, which does not exist; {fix}"
            return f"{e.strerror.lower()}; check the path and its folders' permissions"
        return "not a file (a device, a pipe or a socket); pass an image file"
    if storage.is_url(path) or os.path.isabs(path):
        return "file not found; check the path"
    return f"file not found; check the path (a relative path starts from the current folder, {os.getcwd()})"


def read_pixels(path, pixels_shape):
    """Returns (uint8 pixels of `pixels_shape`, None) from the raw pixel file at `path`, or (None, its
    problem) when the export takes no pixels (`pixels_shape` None) or the file's size is not theirs."""
    if not storage.isfile(path):
        return None, _why_not_a_file(path)
    if pixels_shape is None:
        return None, (f"is raw pixels ({PIXELS_EXTENSION}), which this model does not take: pass it as a JPEG, "
                      "PNG, BMP or GIF file")
    data, size = storage.read_bytes(path), int(np.prod(pixels_shape))
    if len(data) != size:
        return None, (f"is {len(data)} bytes; a {PIXELS_EXTENSION} file for this model holds exactly {size}: "
                      f"{_pixels_words(pixels_shape)}")
    return np.frombuffer(data, np.uint8).reshape(pixels_shape), None


def _pixels_words(pixels_shape):
    """Returns what a pixel file holds, in words: 'one 28x28 gray image's pixels, a byte each, row by row ...'."""
    height, width, channels = pixels_shape
    if channels == 1:
        return f"one {height}x{width} gray image's pixels, a byte each, row by row (as in Fashion-MNIST's IDX files)"
    return f"one {height}x{width} image's pixels, {channels} bytes each (one a channel), row by row"


def _image_problem(path, predictor):
    """Returns why the image file at `path` cannot be classified (the fix included), or None."""
    if not storage.isfile(path):
        return _why_not_a_file(path)
    problem = check_image(path, predictor.channels).problem  # a CMYK JPEG decodes to RGB, not to gray
    if problem != NOT_AN_IMAGE:
        return problem
    if predictor.pixels_shape is None:
        return f"{problem}; pass a JPEG, PNG, BMP or GIF file"
    return (f"{problem}; pass a JPEG, PNG, BMP or GIF file, or, for raw pixels, a file named *{PIXELS_EXTENSION} "
            f"holding {_pixels_words(predictor.pixels_shape)}")


# A heatmap PNG's text (serving.gradcam): the sha256 of the path of the file it explains (a rerun replaces only its own
# heatmaps), not the path itself, which can name a patient and would travel with the PNG.
HEATMAP_SOURCE_KEY = "Source-SHA256"
HEATMAP_SUFFIX = ".gradcam.png"


def is_heatmap(path):
    """Returns whether the file at `path` is a Grad-CAM heatmap that --explain wrote (by its name and its PNG text)."""
    return path.lower().endswith(HEATMAP_SUFFIX) and png_text(path, HEATMAP_SOURCE_KEY) is not None


def image_paths(paths, left_out_folder=None, note=None):
    """Yields the files to classify: each path that is not a folder as given, and the image files
    (see image_formats.is_image_name) and raw pixel files (is_pixels_name) below each folder, walked
    recursively in sorted order, linked folders included (each folder once), `left_out_folder` not
    (the heatmaps' folder: a rerun classified the heatmaps it had written), nor the heatmaps --explain wrote
    elsewhere (is_heatmap: beside the images, say). A folder's pictures in formats no export reads (.webp,
    .tif...) and its heatmaps are left out, in a line each to `note`. A folder that holds no image is
    yielded itself, in its place, which classify_files answers with that error."""
    for path in paths:
        if not storage.isdir(path):
            yield path
            continue
        found, others = 0, []
        heatmaps = 0
        for parent, _, names in storage.walk(path, left_out=[left_out_folder] if left_out_folder else []):
            for name in names:
                if is_heatmap(storage.join(parent, name)):
                    heatmaps += 1
                elif is_image_name(name) or (is_pixels_name(name) and not name.startswith(".")):
                    found += 1
                    yield storage.join(parent, name)
                else:
                    others.append(name)
        if not found:
            yield path
        if heatmaps and note:
            note(f"left out {heatmaps} Grad-CAM heatmap{'' if heatmaps == 1 else 's'} of {path} (predict.py "
                 "--explain's); name one to classify it")
        unread = unread_images(others)
        if unread and note:
            count = sum(unread.values())
            note(f"left out {count} file{'' if count == 1 else 's'} of {path} in formats the export cannot read "
                 f"({describe_unread(unread)}); convert them to PNG or JPEG to classify them")


def _batches(iterable, size):
    batch = []
    for item in iterable:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def classify_files(predictor, paths, batch_size=BATCH_SIZE, progress_every_secs=10.0, log=None, left_out_folder=None):
    """Yields one dict per file of image_paths(paths, left_out_folder), in order, `batch_size` files at a time:
    {'file', 'class', 'probabilities': {name: p}} or {'file', 'error'}.

    Files whose headers show they cannot be decoded get their problem as the error;
    a batch the model refuses is retried file by file, so one bad file costs only
    itself. Every `progress_every_secs` a line on `log` (stderr) says how far it is.
    """
    log = log or (lambda line: print(line, file=sys.stderr, flush=True))
    start = last = time.monotonic()
    done = 0
    for batch in _batches(image_paths(paths, left_out_folder, note=log), batch_size):
        yield from _classify_batch(predictor, batch)
        done += len(batch)
        if time.monotonic() - last >= progress_every_secs:
            last = time.monotonic()
            log(f"classified {done} files ({done / (last - start):.0f}/s)")


def _classify_batch(predictor, paths):
    """Returns classify_files's dicts for `paths`: raw pixel files and image files each classified in
    one call of their own signature."""
    results, images, pixels = [], ([], []), ([], [])  # (entries, their inputs) of each kind
    for path in paths:
        if is_pixels_name(path):
            kind = pixels
            data, problem = read_pixels(path, predictor.pixels_shape)
        else:
            kind = images
            problem = _image_problem(path, predictor)
            data = None if problem else storage.read_bytes(path)
        results.append({"file": path, **({"error": problem} if problem else {})})
        if not problem:
            kind[0].append(results[-1])
            kind[1].append(data)
    if pixels[0]:
        _fill(predictor.classify_pixels, predictor.class_names, pixels[0], np.stack(pixels[1]))
    if images[0]:
        _fill_images(predictor, *images)
    return results


def _fill_images(predictor, readable, contents):
    """Fills each entry of `readable` with its image's answer, or the decoder's error."""
    try:
        _fill(predictor.classify, predictor.class_names, readable, contents)
    except tf.errors.InvalidArgumentError:
        for entry, data in zip(readable, contents):  # find the file the decoder refused
            try:
                _fill(predictor.classify, predictor.class_names, [entry], [data])
            except tf.errors.InvalidArgumentError as e:
                entry["error"] = f"cannot be decoded ({storage.op_error_line(e)[:200]})"


def _fill(classify, class_names, entries, batch):
    """Adds 'class' and 'probabilities' to each of `entries` from `classify(batch)`."""
    probabilities, names = classify(batch)
    for entry, probs, name in zip(entries, probabilities, names):
        entry["class"] = name
        entry["probabilities"] = {n: float(p) for n, p in zip(class_names, probs)}
