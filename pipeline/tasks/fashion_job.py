"""The Fashion-MNIST job's data and model: the dataset (downloaded, or the shipped sample when
that fails), converted to TFRecord shards, and the design's CNN. Its command line: fashion.py."""
import contextlib
import errno
import functools
import logging
import os

import numpy as np

from cluster.tf_config import read_tf_config
from acquisition import fashion_mnist, storage
from acquisition.errors import DownloadError
from input_fns import baselines, decode, fashion_mnist as fashion_input, synthetic
from models.fashion_cnn import build_fashion_cnn
from pipeline.errors import FlagError, UsageError
from pipeline.tasks import FEATURE_KEY, TaskData
from pipeline.tasks.fashion_dataset import DEFAULT_DATA_DIR, RECIPE_FLAGS, SAMPLE_RECIPE, TRAIN_EXAMPLES

log = logging.getLogger(__name__)

SYNTHETIC_SIZES = {"train": TRAIN_EXAMPLES, "test": 10000}  # the real dataset's, so --epochs means the same
# The export's inputs: image files (any size and colour) in serving_default, and the IDX files' raw
# pixels (uint8 [n, 28, 28, 1], 784 bytes an image) in decode.PIXELS_SIGNATURE.
SERVING_KEY, PIXELS_KEY = "image_bytes", "gray_pixels"


def prepare_data(args, batch_size):
    """Returns TaskData over Fashion-MNIST, downloading and converting it first if needed.

    When it falls back to the shipped sample, the TaskData carries the sample's recipe as values
    (its recipe_values: batch size, length, learning rate; see sample_recipe), which the run's
    settings then take; `batch_size` follows the recipe's.
    """
    if args.validation_dir:
        raise FlagError(f"--validation-dir {args.validation_dir}: a folder of class folders to validate on is for the "
                        "images and OCT jobs; the Fashion job holds out --validation-fraction of its training records")
    if args.synthetic:
        def make(training, split):
            return synthetic.make_input_fn(fashion_mnist.IMAGE_SHAPE, fashion_mnist.NUM_CLASSES,
                                           batch_size, training, feature_key=FEATURE_KEY,
                                           num_examples=SYNTHETIC_SIZES[split])
        return TaskData(make(True, "train"), make(False, "test"),
                        SYNTHETIC_SIZES["train"], SYNTHETIC_SIZES["test"], "synthetic",
                        class_names=fashion_mnist.CLASS_NAMES, serving_input_fn=serving_input_fn())
    data_dir, source = _dataset_or_sample(args)
    recipe, recipe_values, report = None, {}, {}
    if source != "real":  # the shipped sample
        recipe_values, recipe = sample_recipe(args)
        report = {"recipe": "shipped sample" if recipe_values else "flags"}
        batch_size = recipe_values.get("batch_size", batch_size)
    with _cache_written_in(data_dir, args.cache_dir):
        splits = fashion_mnist.prepare_shards(data_dir, args.cache_dir)
    if args.validation_fraction:
        return _with_validation(args, batch_size, data_dir, splits, source, recipe, report, recipe_values)
    train_at = functools.partial(fashion_input.make_input_fn, splits["train"]["pattern"], batch_size, True,
                                 FEATURE_KEY, args.seed)
    return TaskData(
        train_at(),
        fashion_input.make_input_fn(splits["test"]["pattern"], batch_size, training=False,
                                   feature_key=FEATURE_KEY),
        splits["train"]["count"], splits["test"]["count"], source, class_names=fashion_mnist.CLASS_NAMES,
        train_class_counts=splits["train"]["class_counts"], serving_input_fn=serving_input_fn(), recipe=recipe,
        recipe_values=recipe_values, report=report, train_input_at=train_at)


@contextlib.contextmanager
def _cache_written_in(data_dir, cache_dir):
    """Turns a failed write of the TFRecord cache into the data dir (no --cache-dir: one that is read-only, or
    not this user's) into a UsageError naming --cache-dir, the flag that fixes it."""
    try:
        yield
    except OSError as e:
        if cache_dir or e.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise
        raise UsageError(f"the TFRecord cache cannot be written into the data dir ({e.filename or data_dir}: "
                         f"{e.strerror}); pass --cache-dir with a folder you can write to (the data dir is then "
                         "only read)") from None


def serving_input_fn():
    """Returns the export's serving input: PNG, JPEG, BMP or GIF files decoded to 28x28 gray (resized,
    colour converted) or the raw pixels, scaled to [0, 1] as the training records are."""
    return decode.make_serving_input_fn(fashion_mnist.IMAGE_SHAPE[:2], fashion_mnist.IMAGE_SHAPE[2],
                                        feature_key=FEATURE_KEY, bytes_key=SERVING_KEY, scale=True,
                                        pixels_key=PIXELS_KEY)


def _with_validation(args, batch_size, data_dir, splits, source, recipe, report, recipe_values):
    """Returns TaskData training on the training images left after the validation split's share."""
    with _cache_written_in(data_dir, args.cache_dir):
        held = fashion_mnist.prepare_validation_shards(data_dir, args.cache_dir, args.validation_fraction)

    def make(pattern, training):
        return fashion_input.make_input_fn(pattern, batch_size, training=training, feature_key=FEATURE_KEY,
                                           seed=args.seed if training else None)
    train_at = functools.partial(fashion_input.make_input_fn, held["train"]["pattern"], batch_size, True,
                                 FEATURE_KEY, args.seed)
    return TaskData(train_at(), make(splits["test"]["pattern"], False),
                    held["train"]["count"], splits["test"]["count"], source, class_names=fashion_mnist.CLASS_NAMES,
                    train_class_counts=held["train"]["class_counts"], serving_input_fn=serving_input_fn(),
                    recipe=recipe, recipe_values=recipe_values, report=report,
                    validation_input_fn=make(held["validation"]["pattern"], False),
                    num_validation_examples=held["validation"]["count"], train_input_at=train_at)


def sample_recipe(args):
    """Returns (SAMPLE_RECIPE when the command line gave none of RECIPE_FLAGS (its `explicit_flags`,
    see pipeline.flag_types.RecordedStore), else {}; the run header's words for the recipe that
    applies and why)."""
    given = [flag for flag in RECIPE_FLAGS if flag in getattr(args, "explicit_flags", ())]
    names = ["--" + flag.replace("_", "-") for flag in RECIPE_FLAGS]
    flags = ", ".join(names[:-1]) + " or " + names[-1]
    if given:
        return {}, (f"the flags' ({', '.join('--' + flag.replace('_', '-') for flag in given)} given): any of "
                       f"{flags} turns the shipped sample's recipe off")
    recipe = SAMPLE_RECIPE
    return dict(recipe), (f"the shipped sample's: batch {recipe['batch_size']} per replica, {recipe['epochs']:g} "
                          f"epochs, learning rate {recipe['learning_rate']:g} not scaled, as this run trains on 800 "
                          f"images and no {flags} was given (any one turns it off)")


def _dataset_or_sample(args):
    """Returns (data dir, data source): the dataset, downloaded if absent, or, when that fails on
    one machine with the default --data-dir, the sample shipped with the project."""
    for flag, value in (("--data-dir", args.data_dir), ("--cache-dir", args.cache_dir)):
        if value and storage.is_url(value):  # never a local folder made from a URL
            raise UsageError(f"{flag} {value}: the Fashion-MNIST job downloads and converts its IDX files on local "
                             "disk only; pass a local folder (model dirs may be on a bucket: --model-dir)")
    data_dir = os.path.normpath(os.path.abspath(os.path.expanduser(args.data_dir)))
    try:
        fashion_mnist.download(data_dir, base_url=args.download_url or fashion_mnist.DOWNLOAD_URL)
        return data_dir, "real"
    except DownloadError as e:
        files = ", ".join(n for pair in fashion_mnist.FILES.values() for n in pair)
        advice = (f"Put the four files ({files}) in a folder and pass it as --data-dir, or run with "
                  "--synthetic to try the job without the dataset")
        # A cluster's tasks must all train on the same data: they never fall back.
        if args.no_sample_fallback or data_dir != os.path.normpath(DEFAULT_DATA_DIR) or read_tf_config() is not None:
            raise DownloadError(f"{e}. {advice}") from None
        sample_dir = fashion_mnist.unpack_shipped_sample(data_dir + "-sample")
        log.warning("NOT THE FULL DATASET: %s, so this run %s on the 1,000-image Fashion-MNIST sample shipped "
                    "with the project (%d train / %d test, in %s; its own recipe unless you set one). %s; "
                    "--no-sample-fallback makes this an error.",
                    e, "evaluates" if args.eval_only else "trains", fashion_mnist.SAMPLE_TRAIN_IMAGES,
                    1000 - fashion_mnist.SAMPLE_TRAIN_IMAGES, sample_dir, advice)
        return sample_dir, "real (shipped 1,000-image sample)"


def build_model(args, learning_rate):
    """Returns the compiled Fashion-MNIST CNN."""
    return build_fashion_cnn(learning_rate, input_shape=fashion_mnist.IMAGE_SHAPE,
                             num_classes=fashion_mnist.NUM_CLASSES, input_name=FEATURE_KEY,
                             optimizer=args.optimizer, weight_decay=args.weight_decay)


def input_variant(args, variant, batch_size, workdir):
    """Returns (input_fn, 0) of the benchmark's input variant: 'pipeline' (the job's training input),
    'design' (the write-up's in-memory arrays) or 'synthetic'."""
    if variant == "synthetic":
        return synthetic.make_input_fn(fashion_mnist.IMAGE_SHAPE, fashion_mnist.NUM_CLASSES, batch_size, True,
                                       feature_key=FEATURE_KEY), 0
    if variant == "pipeline":
        return prepare_data(args, batch_size).train_input_fn, 0
    data_dir, _ = _dataset_or_sample(args)  # the 'pipeline' variant's data (offline: the shipped sample)
    images, labels = fashion_mnist.load_split(data_dir, "train")
    return baselines.design_array_input_fn(
        (images[..., None] / 255.0).astype(np.float32),
        np.eye(fashion_mnist.NUM_CLASSES, dtype=np.float32)[labels], batch_size, FEATURE_KEY), 0
