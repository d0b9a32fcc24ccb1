"""Exports for devices: an export's pixels signature converted to TensorFlow Lite (float32, float16 and
full-integer int8 calibrated on training images), each file measured against the SavedModel on the
test split (accuracy, agreement, size, latency), and a predict.py client over a .tflite file."""
import contextlib
import json
import logging
import os
import statistics
import sys
import time

import numpy as np
import tensorflow as tf

from acquisition import storage
from input_fns import FEATURE_KEY
from input_fns.decode import DECODE_FILE, FORBIDDEN_VIEWS_FILE, PIXELS_SIGNATURE, decode_to_pixels, decodes_reduced, \
    forbidden_views
from serving import TFLITE_DIR, ConversionError, ExportNotFoundError
from serving.export import CLASS_NAMES_FILE, PROBABILITIES, read_class_names
from serving.predictor import Predictor, check_class_count

log = logging.getLogger(__name__)

KINDS = ("float32", "float16", "int8")  # --tflite's choices, in this order
TFLITE_EXTENSION = ".tflite"
FIGURES_FILE = "tflite.json"  # beside the .tflite files: their figures (also results.json's 'tflite')
CALIBRATION_IMAGES = 200  # training images the int8 conversion calibrates its ranges on
LATENCY_IMAGES = 50  # test images each file is timed on, one at a time
LATENCY_WARM_UP = 3  # calls before the timing (the first allocates the tensors)


def output_dir(export_dir):
    """Returns where the .tflite files of the export at `export_dir` go: <export base>/tflite/<its
    timestamp> (predict.py's newest-export rule reads only the timestamped folders beside it)."""
    export_dir = export_dir.rstrip("/")
    base, version = export_dir.rsplit("/", 1)
    return storage.join(base, TFLITE_DIR, version)


def as_pixels(images):
    """Returns a batch of input images as the pixels signature's uint8: as they are when uint8, and
    the Fashion job's records (float32 in [0, 1], the IDX bytes / 255) scaled back to their bytes."""
    images = np.asarray(images)
    if images.dtype == np.uint8:
        return images
    return np.clip(np.round(images * 255.0), 0, 255).astype(np.uint8)


def as_class_indices(labels):
    """Returns an input's labels (class indices, or one-hot rows) as int class indices [n]."""
    labels = np.asarray(labels)
    if labels.ndim == 2 and labels.shape[1] > 1:
        return labels.argmax(axis=1)
    return labels.reshape(-1).astype(np.int64)


def pixel_batches(input_fn, limit=None):
    """Yields (uint8 images [n, h, w, c], class indices [n]) from an Estimator input_fn's batches,
    eagerly, until it ends or `limit` images have come (the last batch cut to it)."""
    seen = 0
    for features, labels in input_fn():
        images = features[FEATURE_KEY] if isinstance(features, dict) else features
        images, labels = as_pixels(images.numpy()), as_class_indices(labels.numpy())
        if limit is not None:
            images, labels = images[:limit - seen], labels[:limit - seen]
        seen += len(images)
        yield images, labels
        if limit is not None and seen >= limit:
            return


def pixels_input_name(export_dir):
    """Returns the name of the one input of the export's pixels signature; raises when the
    export has none (ExportNotFoundError: an export made before every job had one)."""
    signatures = tf.saved_model.load(export_dir).signatures
    if PIXELS_SIGNATURE not in signatures:
        raise ExportNotFoundError(f"the export {export_dir} has no '{PIXELS_SIGNATURE}' signature (uint8 pixels), "
                                  "which a TFLite conversion takes: it was made before its job exported one; a new "
                                  "run (another --model-dir) exports one")
    ((name, _),) = signatures[PIXELS_SIGNATURE].structured_input_signature[1].items()
    return name


def convert(export_dir, kind, calibration=None, input_name=None):
    """Returns the .tflite bytes of the export's pixels signature in `kind`: 'float32'; 'float16'
    (weights stored in float16); 'int8' (every op int8, TFLITE_BUILTINS_INT8 only, its ranges calibrated
    on `calibration`, uint8 images [n, h, w, c] fed one at a time under `input_name`)."""
    converter = tf.lite.TFLiteConverter.from_saved_model(export_dir, signature_keys=[PIXELS_SIGNATURE])
    if kind == "float16":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.target_spec.supported_types = [tf.float16]
    elif kind == "int8":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.representative_dataset = lambda: ({input_name: image[None]} for image in calibration)
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    elif kind != "float32":
        raise ValueError(f"no TFLite kind {kind!r}; the kinds are {', '.join(KINDS)}")
    with _converter_chatter_held_back():
        return converter.convert()


@contextlib.contextmanager
def _converter_chatter_held_back():
    """Sends what the converter's C++ writes straight to stderr (its 'Summary on the non-converted ops', the
    quantizer's settings), which no log level silences, to /dev/null unless TensorFlow's C++ log level shows
    warnings (--verbose sets it: pipeline.cli). A failed conversion's own errors are in the exception it
    raises. Where stderr cannot be redirected (closed), it is left as it is."""
    try:
        shown = int(os.environ.get("TF_CPP_MIN_LOG_LEVEL", "0")) < 2
    except ValueError:
        shown = True
    saved = None
    if not shown:
        sys.stderr.flush()
        try:
            saved = os.dup(2)
        except OSError:  # no stderr at all
            saved = None
        else:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 2)
            os.close(devnull)
    try:
        yield
    finally:
        if saved is not None:
            os.dup2(saved, 2)
            os.close(saved)


def signature_runner(model, num_threads=None):
    """Returns the pixels signature of the .tflite bytes `model` as a callable (input name=array ->
    {output name: array}) and the name of its input."""
    interpreter = tf.lite.Interpreter(model_content=model, num_threads=num_threads)
    signatures = interpreter.get_signature_list()
    if not signatures:
        raise ExportNotFoundError("the TFLite model has no signature, so it was not converted by a run here (--tflite "
                                  "writes one); pass a .tflite file a run wrote")
    key = PIXELS_SIGNATURE if PIXELS_SIGNATURE in signatures else next(iter(signatures))
    return interpreter.get_signature_runner(key), signatures[key]["inputs"][0]


def latency_ms(model, images):
    """Returns the median milliseconds of one image through the .tflite bytes `model` on one thread (a
    device's view: batch 1), over `images` after LATENCY_WARM_UP calls."""
    runner, name = signature_runner(model, num_threads=1)
    for image in images[:LATENCY_WARM_UP]:
        runner(**{name: image[None]})
    times = []
    for image in images:
        start = time.perf_counter()
        runner(**{name: image[None]})
        times.append(time.perf_counter() - start)
    return round(1000 * statistics.median(times), 4)


class _Tally:
    """Running figures of one model against the SavedModel: correct answers, agreements, the largest
    probability difference."""

    def __init__(self):
        self.correct = self.agree = 0
        self.max_difference = 0.0

    def add(self, probabilities, reference, labels):
        """Counts a batch: `probabilities` and the SavedModel's `reference` [n, classes], `labels` [n]."""
        predicted = probabilities.argmax(axis=1)
        self.correct += int((predicted == labels).sum())
        self.agree += int((predicted == reference.argmax(axis=1)).sum())
        self.max_difference = max(self.max_difference, float(np.abs(probabilities - reference).max()))


def evaluate(export_dir, models, test_batches):
    """Returns (the SavedModel's accuracy, the number of test images, {kind: _Tally}, the first
    LATENCY_IMAGES test images) from running the export's pixels signature and each of `models` ({kind:
    .tflite bytes}) on every batch of `test_batches`."""
    reference_fn = tf.saved_model.load(export_dir).signatures[PIXELS_SIGNATURE]
    ((reference_input, _),) = reference_fn.structured_input_signature[1].items()
    runners = {kind: signature_runner(model, num_threads=os.cpu_count()) for kind, model in models.items()}
    tallies, correct, count, kept = {kind: _Tally() for kind in models}, 0, 0, []
    for images, labels in test_batches:
        reference = reference_fn(**{reference_input: tf.constant(images)})[PROBABILITIES].numpy()
        correct += int((reference.argmax(axis=1) == labels).sum())
        count += len(labels)
        kept.extend(images[:LATENCY_IMAGES - len(kept)])
        for kind, (runner, name) in runners.items():
            tallies[kind].add(runner(**{name: images})[PROBABILITIES], reference, labels)
    if not count:
        raise ValueError("the test split gave no images to evaluate the TFLite files on")
    return correct / count, count, tallies, np.stack(kept)


@contextlib.contextmanager
def _absl_warnings_only():
    """Keeps absl's INFO lines (each SavedModel load's 'Fingerprint not found ...') out of the job's log."""
    absl, level = logging.getLogger("absl"), logging.getLogger("absl").level
    absl.setLevel(logging.WARNING)
    try:
        yield
    finally:
        absl.setLevel(level)


def convert_and_evaluate(export_dir, train_input_fn, eval_input_fn, kinds, tolerance, cpu):
    """Returns _convert_and_evaluate's figures, made without absl's INFO lines."""
    with _absl_warnings_only():
        try:
            return _convert_and_evaluate(export_dir, train_input_fn, eval_input_fn, kinds, tolerance, cpu)
        except Exception as e:  # noqa: BLE001 - the converter's own error class, told apart by its words
            if "bf16" not in str(e):
                raise
            raise ConversionError(f"{export_dir} computes in bfloat16 (trained with --precision bf16), and TFLite "
                                  "has no bfloat16 tensors: convert a run trained with --precision fp32 or "
                                  "bf16-amp") from None


def _convert_and_evaluate(export_dir, train_input_fn, eval_input_fn, kinds, tolerance, cpu):
    """Converts the export's pixels signature to each of `kinds` (KINDS' names) into output_dir(export_dir)
    with its class names, evaluates each file against the SavedModel on `eval_input_fn`'s test images,
    writes FIGURES_FILE there and returns the figures (results.json's 'tflite'): an int8 file losing more
    than `tolerance` accuracy is flagged ('over_tolerance') and named in 'warnings'. `cpu` names the CPU
    the latencies were measured on."""
    target = output_dir(export_dir)
    models, calibrated = _convert_all(export_dir, kinds, train_input_fn)
    log.info("evaluating %s on the test split beside the SavedModel", ", ".join(kinds))
    accuracy, count, tallies, timed = evaluate(export_dir, models, pixel_batches(eval_input_fn))
    storage.makedirs(target)
    for name in (CLASS_NAMES_FILE, DECODE_FILE, FORBIDDEN_VIEWS_FILE):  # what the .tflite files' clients read
        source = storage.join(export_dir, "assets.extra", name)
        if storage.isfile(source):
            storage.write_atomically(storage.join(target, name), storage.read_bytes(source))
    files, earlier = {}, _earlier_figures(target, kinds, count, accuracy, tolerance)
    files.update(earlier.get("files", {}))
    if "int8" not in kinds and "int8" in files:
        calibrated = earlier["calibration_images"]
    for kind, model in models.items():
        path = storage.join(target, kind + TFLITE_EXTENSION)
        storage.write_atomically(path, model)
        files[kind] = _file_figures(path, len(model), tallies[kind], count, accuracy, latency_ms(model, timed),
                                    kind, tolerance)
    record = {"dir": storage.absolute(target), "signature": PIXELS_SIGNATURE, "test_images": count,
              "saved_model_accuracy": round(accuracy, 6),
              "calibration_images": calibrated, "tolerance": tolerance,
              "cpu": cpu, "latency": f"median ms per image, batch of 1, 1 thread, over {len(timed)} test images",
              "files": files, "warnings": [_warning(kind, f, accuracy, tolerance) for kind, f in files.items()
                                           if f.get("over_tolerance")]}
    storage.write_atomically(storage.join(target, FIGURES_FILE), json.dumps(record, indent=2).encode())
    return record


def _earlier_figures(target, kinds, count, accuracy, tolerance):
    """Returns FIGURES_FILE's record in `target` with only the files of other kinds than `kinds` that are
    still there and were measured on the same test images (`count`, the SavedModel's `accuracy`): a
    conversion of one kind (--eval-only --tflite float16, say) keeps the figures of the others, an int8
    file's held against this `tolerance`. {} when there is none."""
    try:
        record = json.loads(storage.read_text(storage.join(target, FIGURES_FILE)))
    except (OSError, ValueError):
        return {}
    if record.get("test_images") != count or record.get("saved_model_accuracy") != round(accuracy, 6):
        return {}
    files = {kind: {**figures, "file": storage.absolute(storage.join(target, kind + TFLITE_EXTENSION))}
             for kind, figures in record.get("files", {}).items()
             if kind not in kinds and storage.isfile(storage.join(target, kind + TFLITE_EXTENSION))}
    for figures in files.values():
        if "over_tolerance" in figures:
            figures["over_tolerance"] = accuracy - figures["accuracy"] > tolerance
    return {**record, "files": files}


def calibration_images(train_input_fn):
    """Returns the distinct uint8 images [n, h, w, c] among the first CALIBRATION_IMAGES the training input
    gives, in their order: a training set smaller than that repeats in its stream, and each image counts once."""
    drawn = np.concatenate([batch for batch, _ in pixel_batches(train_input_fn, CALIBRATION_IMAGES)])
    _, first = np.unique(drawn.reshape(len(drawn), -1), axis=0, return_index=True)
    return drawn[np.sort(first)]


def _convert_all(export_dir, kinds, train_input_fn):
    """Returns ({kind: .tflite bytes} of the export for each of `kinds`, the number of distinct training
    images the int8 conversion calibrated on: 0 without int8)."""
    input_name, calibration = pixels_input_name(export_dir), None
    if "int8" in kinds:
        calibration = calibration_images(train_input_fn)
    models = {}
    for kind in kinds:
        log.info("converting %s to TFLite %s", export_dir, kind)
        models[kind] = convert(export_dir, kind, calibration, input_name)
    return models, 0 if calibration is None else len(calibration)


def _file_figures(path, size, tally, count, reference_accuracy, latency, kind, tolerance):
    """Returns one .tflite file's figures: its path, size in bytes, accuracy on `count` test images and its
    change from the SavedModel's, agreement, largest probability difference, `latency` (ms per image) and,
    for int8, whether it lost more than `tolerance`."""
    accuracy = tally.correct / count
    figures = {"file": storage.absolute(path), "bytes": size, "accuracy": round(accuracy, 6),
               "accuracy_change": round(accuracy - reference_accuracy, 6), "agreement": round(tally.agree / count, 6),
               "max_probability_difference": round(tally.max_difference, 6), "latency_ms": latency}
    if kind == "int8":
        figures["over_tolerance"] = reference_accuracy - accuracy > tolerance
    return figures


def _warning(kind, figures, reference_accuracy, tolerance):
    """Returns the loud line of a file that lost more accuracy than `tolerance`."""
    return (f"WARNING: the {kind} TFLite model loses {-figures['accuracy_change']:.4f} accuracy "
            f"({figures['accuracy']:.4f} against the SavedModel's {reference_accuracy:.4f}), more than "
            f"--tflite-tolerance {tolerance:g}: check it before shipping {figures['file']}")


def current_record(record):
    """Returns the figures of the .tflite files in results.json's 'tflite' `record`'s folder as they are now: its
    FIGURES_FILE, which an --eval-only --tflite rewrites for the files it converts again while results.json keeps
    the training run's; `record` itself where that file cannot be read."""
    try:
        now = json.loads(storage.read_text(storage.join(record["dir"], FIGURES_FILE)))
    except (KeyError, OSError, ValueError):
        return record
    # (paths under the folder `record` names: a model dir moved or copied since, pipeline.results.recorded_here)
    files = {kind: {**figures, "file": storage.join(record["dir"], kind + TFLITE_EXTENSION)}
             for kind, figures in now.get("files", {}).items()}
    return {**now, "dir": record["dir"], "files": files}


def summary_lines(record):
    """Returns the summary's lines of results.json's 'tflite' record: the SavedModel's accuracy the files' changes
    are against (one view of each image: under --tta the eval line's is the views' mean), one a file, then its
    warnings."""
    baseline = record.get("saved_model_accuracy")
    lines = [f"  tflite:  the SavedModel's accuracy {baseline:.4f} on the {record['test_images']} test images, one "
             "view each, is what each file's change is against"] if baseline is not None else []
    for kind in sorted(record["files"], key=lambda k: KINDS.index(k) if k in KINDS else len(KINDS)):
        f = record["files"][kind]  # in KINDS' order (results.json sorts its keys)
        lines.append(f"  tflite:  {kind:7s} {f['bytes'] / 2 ** 20:7.2f} MiB  accuracy {f['accuracy']:.4f} "
                     f"({f['accuracy_change']:+.4f}), agrees on {100 * f['agreement']:.1f}% of "
                     f"{record['test_images']}, {f['latency_ms']:.3f} ms/image  {f['file']}")
    return lines + [f"  {w}" for w in record.get("warnings", [])]


def load_tflite_predictor(path):
    """Returns a serving.predictor.Predictor over the .tflite file at `path` (its class names read from the
    class_names.txt beside it): image files are decoded and resized here as the export's serving_default
    decodes them (input_fns.decode, reduced when the DECODE_FILE beside it says so), then fed as pixels."""
    if not storage.isfile(path):
        raise ExportNotFoundError(f"no TFLite model at {path}: pass a .tflite file a run wrote (--tflite) into "
                                  f"<model dir>/export/{TFLITE_DIR}/<timestamp>/")
    names_path = storage.join(os.path.dirname(path), CLASS_NAMES_FILE)
    if not storage.isfile(names_path):
        raise ExportNotFoundError(f"no {CLASS_NAMES_FILE} beside {path}: the class names the model's outputs "
                                  "stand for (copy it from the export's assets.extra)")
    class_names = read_class_names(names_path)
    model = storage.read_bytes(path)
    check_whole_model(model, path)
    runner, name = signature_runner(model)
    check_converted_here(runner, name, path)
    shape = tuple(int(n) for n in runner.get_input_details()[name]["shape"][1:])
    outputs = int(runner.get_output_details()[PROBABILITIES]["shape"][-1])
    check_class_count(class_names, outputs, names_path, path)

    def classify_pixels(batch):
        probabilities = runner(**{name: np.asarray(batch, np.uint8)})[PROBABILITIES]
        return probabilities, [class_names[i] for i in probabilities.argmax(axis=-1)]

    fast = decodes_reduced(os.path.dirname(path))

    def classify(contents):
        return classify_pixels(decode_to_pixels(contents, shape, fast))

    return Predictor(path, class_names, classify, shape, classify_pixels, fast, forbidden_views(os.path.dirname(path)))


def check_converted_here(runner, name, path):
    """Raises ExportNotFoundError unless the signature `runner` (input `name`) of the .tflite file at `path` takes
    uint8 pixels [n, height, width, channels] and gives 'probabilities', as the files --tflite writes do."""
    given = runner.get_input_details()[name]
    outputs = runner.get_output_details()
    if PROBABILITIES in outputs and given["dtype"] == np.uint8 and len(given["shape"]) == 4:
        return
    raise ExportNotFoundError(
        f"{path} is not a model a run here converted: its signature takes {name} ({np.dtype(given['dtype']).name}, "
        f"{len(given['shape'])} dimensions) and gives {', '.join(sorted(outputs))}, not uint8 pixels and "
        f"{PROBABILITIES}; pass a .tflite file a run wrote (--tflite), or the export its run made")


def check_whole_model(model, path):
    """Raises ExportNotFoundError unless the bytes `model` (read from `path`) are a whole TFLite FlatBuffer:
    TensorFlow's interpreter reads them unchecked, and a truncated file crashed the process."""
    from tensorflow.lite.tools import flatbuffer_utils
    if model[4:8] != b"TFL3":
        raise ExportNotFoundError(f"{path} is not a TFLite model (it lacks the TFL3 mark): pass a .tflite file a "
                                  "run wrote (--tflite)")
    try:
        flatbuffer_utils.convert_bytearray_to_object(bytearray(model))
    except Exception:  # noqa: BLE001 - struct.error, IndexError, ValueError (their words say nothing more)
        raise ExportNotFoundError(f"{path} is not a whole TFLite model ({len(model):,} bytes: its parts run past its "
                                  "end or out of place, so it was cut short or damaged); copy it again, or convert it "
                                  "again with --eval-only --tflite on its model dir") from None

