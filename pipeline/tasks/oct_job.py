"""The retinal OCT job's data and model: OCT2017's JPEG folders (or shards prepared from them,
or synthetic scans) and the VGG16 transfer model. Its command line: oct.py."""
import collections
import fnmatch
import logging
import math
import os

import tensorflow as tf

from acquisition import image_checks, retinal_oct, shards, storage
from acquisition.errors import InputDataError
from input_fns import baselines, decode, flip_views, image_folder, image_list, records, synthetic
from models.backbones import build_image_classifier
from pipeline import undecodable
from pipeline.errors import FlagError, UsageError
from pipeline.tasks import FEATURE_KEY, FILE_KEY, VALIDATION_FILES, TaskData, backbone_weights, \
    trained_validation_list, write_validation_files
from pipeline.tasks.oct_dataset import DEFAULT_DATA_DIR, FORBIDDEN_FLIPS, PATIENT_PATTERN, TRAIN_EXAMPLES
from pipeline.results import read_results
from pipeline.validation.split import check_init_from_validation, listed_validation, named_as, split_off_validation

# OCT2017's split sizes, so that --epochs means the same on synthetic data.
SYNTHETIC_SIZES = {"train": TRAIN_EXAMPLES, "test": 968}
RECORDS_ADVICE = "make the shards again with scripts/prepare_oct.py"
# The export's second signature (decode.PIXELS_SIGNATURE) takes decoded uint8 scans [n, size, size, 1]
# under this key: what a TFLite conversion takes (serving.tflite).
PIXELS_KEY = "pixels"
CHANNELS = 1  # the scans are grayscale JPEGs; the model repeats them to 3 channels
VALIDATION_SEED = 0  # the patients drawn for the validation split: the same in every run and resume

log = logging.getLogger(__name__)


def _image_size(args):
    return (args.image_size, args.image_size)


def check_step_memory(image_size, batch_size, available=None):
    """Raises UsageError when one replica's VGG16 step would need more memory than the machine
    has: about 512 bytes per pixel per image (its two largest float32 activations, 64
    channels each, at full size)."""
    available = available or os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    needed = 512 * image_size * image_size * batch_size
    if needed > available:
        raise UsageError(f"--image-size {image_size} with --batch-size {batch_size} needs about "
                         f"{needed / 2 ** 30:.0f} GiB per step for VGG16's activations and this machine has "
                         f"{available / 2 ** 30:.0f} GiB; use a smaller --image-size or --batch-size")


def prepare_data(args, batch_size):
    """Returns TaskData over OCT2017's train and test folders (or prepared shards, or synthetic data)."""
    size = _image_size(args)
    check_step_memory(args.image_size, batch_size)
    serving = decode.make_serving_input_fn(size, CHANNELS, fast_decode=args.decode == "reduced",
                                           feature_key=FEATURE_KEY, pixels_key=PIXELS_KEY,
                                           forbidden_views=flip_views(FORBIDDEN_FLIPS))
    check_cache(args)
    if args.synthetic:
        if args.decode == "reduced":
            raise FlagError("--decode reduced decodes JPEG files, and --synthetic data is generated pixels, never "
                            "decoded; drop --decode")

        def make(training, split):
            return synthetic.make_input_fn(size + (CHANNELS,), len(retinal_oct.CLASS_NAMES), batch_size, training,
                                           feature_key=FEATURE_KEY, num_examples=SYNTHETIC_SIZES[split],
                                           dtype=tf.uint8)
        return TaskData(make(True, "train"), make(False, "test"), SYNTHETIC_SIZES["train"],
                        SYNTHETIC_SIZES["test"], "synthetic", class_names=retinal_oct.CLASS_NAMES,
                        serving_input_fn=serving)
    if args.records_dir:
        if args.data_dir != DEFAULT_DATA_DIR:
            raise FlagError(f"--records-dir trains and tests on the prepared shards, and reads no --data-dir; drop "
                            f"--data-dir {args.data_dir}, or --records-dir to train on its JPEG folders")
        if args.decode == "reduced":
            raise FlagError("--decode reduced decodes JPEG files, and --records-dir's shards hold scans decoded in "
                            "full (scripts/prepare_oct.py): the export would decode otherwise than training did; "
                            "drop --decode, or train on the JPEG folders (--data-dir)")
        asked = args.validation_fraction and "validation_fraction" in getattr(args, "explicit_flags", ())
        if args.validation_dir or asked:
            raise FlagError("--records-dir's shards hold no file names, so no validation split by patient can be "
                            "drawn from them; train on the JPEG folders (--data-dir) for one, or pass "
                            "--validation-fraction 0")
        stopping = [flag for flag, value in (("--stop-at-accuracy", args.stop_at_accuracy),
                                             ("--patience", args.patience),
                                             ("--calibrate", args.calibrate != "none" or None)) if value is not None]
        if stopping:
            raise FlagError(f"{' and '.join(stopping)} need{'s' if len(stopping) == 1 else ''} the validation "
                            "split, and --records-dir's shards hold no file names, so no validation split by patient "
                            "can be drawn from them; train on the JPEG folders (--data-dir) for one, or drop "
                            f"{' and '.join(stopping)}")
        log.info("no validation split: --records-dir's shards hold no file names to keep each patient's scans on "
                 "one side (the JPEG folders, --data-dir, have one); a training run exports and tests its last "
                 "checkpoint")
        return _records_data(args, batch_size, size, serving)
    return _folder_data(args, batch_size, size, serving)


def check_cache(args):
    """Raises FlagError (exit 2) for a --cache that cannot apply: generated data (--synthetic), or files
    under a folder for the prepared shards, which are such files already (in memory they are kept); and
    for --shuffle-buffer without a cache, whose images it shuffles."""
    if args.cache is None:
        if "shuffle_buffer" in args.explicit_flags:
            raise FlagError("--shuffle-buffer shuffles the images a --cache holds, and this run has no cache (its "
                            "file names are shuffled whole each epoch); drop --shuffle-buffer, or add --cache")
        return
    if args.synthetic:
        raise FlagError("--cache keeps the decoded, resized training scans of the first epoch, and --synthetic data "
                        "is one generated batch, kept in memory already; drop --cache")
    if args.records_dir and args.cache != "":
        raise FlagError(f"--cache DIR keeps decoded scans in files, and --records-dir's shards are such files "
                        f"already; drop --cache {args.cache}, or pass --cache memory to keep them in memory")


def _cache_report(args):
    """Returns results.json's word for where the training images are kept after the first epoch."""
    return {"cache": None if args.cache is None else "memory" if args.cache == "" else args.cache}


def _folder_data(args, batch_size, size, serving):
    """Returns TaskData over the JPEG folders: test/, and train/ less the validation split (by patient)."""
    root = dataset_root(args.data_dir)
    left_out = undecodable.left_out(args.model_dir)
    scans = {split: image_checks.scan_folder(retinal_oct.split_pattern(root, split), retinal_oct.CLASS_NAMES,
                                             CHANNELS).with_problems(left_out)
             for split in ("train", "test")}
    image_checks.check_bad_files(scans.values(), args.on_bad_image)
    # A patient's scans all on one side: near-duplicate B-scans of one eye would inflate validation accuracy.
    train = scans["train"].good()
    listed = listed_validation(trained_validation_list(args.model_dir))
    held_out = split_off_validation(args, *train, _read_validation_dir(args, left_out), VALIDATION_SEED,
                                    PATIENT_PATTERN, retinal_oct.CLASS_NAMES, test_files=scans["test"].good()[0],
                                    listed=listed)
    cache_key = {"pattern": retinal_oct.split_pattern(root, "train"), "files_fingerprint": scans["train"].fingerprint,
                 "skipped": scans["train"].bad_files}
    report = {"data_root": root, "skipped_files": scans["train"].bad_files + scans["test"].bad_files,
              "skipped_file_problems": {**scans["train"].problems, **scans["test"].problems},
              "undecodable_left_out": undecodable.left_out_of_training(
                  left_out, [f for f in left_out if fnmatch.fnmatch(f, os.path.abspath(
                      retinal_oct.split_pattern(root, "train")))], listed), **_cache_report(args)}
    if held_out and args.init_from and not tf.train.latest_checkpoint(args.model_dir):  # (a resume reads none)
        validation = held_out["validation"][0]
        leaked = named_as(_trained_by(args.init_from, root, train[0]) or [], validation)
        check_init_from_validation(args.init_from, leaked, validation, "--validation-fraction")
    if held_out:
        train = held_out["train"]
        cache_key["validation"] = [args.validation_fraction, VALIDATION_SEED, args.validation_dir]
        report["validation_files"] = storage.absolute(storage.join(args.model_dir, VALIDATION_FILES))

    def make(files, labels, training, skip=0):
        return image_list.make_input_fn(image_list.ImageListConfig(
            files, labels, len(retinal_oct.CLASS_NAMES), size, CHANNELS, batch_size, training,
            feature_key=FEATURE_KEY, seed=args.seed, fast_decode=args.decode == "reduced",
            cache=args.cache if training else None, cache_key=cache_key, shuffle_buffer=args.shuffle_buffer,
            skip=skip))

    def train_input_at(skip=0):
        read_train = make(*train, True, skip)

        def train_input_fn(input_context=None):  # the Estimator calls it once every check before training passed
            if held_out:
                write_validation_files(args.model_dir, held_out["validation"][0])
            return read_train(input_context)
        return train_input_fn

    eval_input_fn = image_folder.make_input_fn(image_folder.ImageFolderConfig(
        retinal_oct.split_pattern(root, "test"), retinal_oct.CLASS_NAMES, size, batch_size, False,
        scan=scans["test"], on_bad_image=args.on_bad_image, channels=CHANNELS,
        fast_decode=args.decode == "reduced", feature_key=FEATURE_KEY, seed=args.seed, file_key=FILE_KEY))
    _, test_labels = scans["test"].good()
    return TaskData(train_input_at(), eval_input_fn, len(train[0]), len(test_labels), "real",
                    class_names=retinal_oct.CLASS_NAMES, eval_labels=test_labels,
                    train_class_counts=[collections.Counter(train[1])[i] for i in range(len(retinal_oct.CLASS_NAMES))],
                    serving_input_fn=serving, report=report,
                    validation_input_fn=make(*held_out["validation"], False) if held_out else None,
                    validation_files=held_out["validation"][0] if held_out else None,
                    num_validation_examples=len(held_out["validation"][0]) if held_out else 0,
                    train_input_at=train_input_at)


def _trained_by(init_from, root, train_files):
    """Returns the scans the OCT run in `init_from` (--init-from) trained on: the train/ scans of its data root
    (this run's `train_files` where that is this run's `root`, or not on this machine: a model dir copied from a
    cluster; OCT2017's names are unique) less those it held out for validation (by name: see named_as); None
    where it recorded no data root (a run stopped before its results.json, or one trained from --records-dir)."""
    try:
        source_root = read_results(init_from).get("data_root")
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(source_root, str):
        return None
    files = (source_root != root and storage.glob(retinal_oct.split_pattern(source_root, "train"))) or train_files
    held = set(named_as(listed_validation(storage.join(init_from, VALIDATION_FILES)) or (), files))
    return [f for f in files if f not in held]


def _read_validation_dir(args, undecodable):
    """Returns a function of --validation-dir giving its scans' (files, labels), bad files (the `undecodable`
    ones too: see pipeline.undecodable.left_out) handled as --on-bad-image says."""
    def read(folder):
        scan = image_checks.scan_folder(os.path.join(folder, "*", retinal_oct.IMAGE_PATTERN),
                                        retinal_oct.CLASS_NAMES, CHANNELS).with_problems(undecodable)
        image_checks.check_bad_files([scan], args.on_bad_image)
        return scan.good()
    return read


def read_records_manifest(records_dir):
    """Returns the manifest of the OCT shards in `records_dir` (see acquisition.shards.read_manifest)."""
    return shards.read_manifest(records_dir, RECORDS_ADVICE, splits=("train", "test"))


def _records_data(args, batch_size, size, serving):
    shards.hold_for_reading(args.records_dir)
    manifest = read_records_manifest(args.records_dir)
    if tuple(manifest["image_shape"][:2]) != size:
        raise FlagError(f"the shards in {args.records_dir} hold {manifest['image_shape'][0]}-pixel images; "
                        f"pass --image-size {manifest['image_shape'][0]} or prepare them again")
    splits = manifest["splits"]

    def make(split, training, skip=0):
        return records.make_image_records_input_fn(splits[split]["pattern"], size + (CHANNELS,),
                                                   len(retinal_oct.CLASS_NAMES), batch_size, training,
                                                   FEATURE_KEY, seed=args.seed, skip=skip,
                                                   cache_in_memory=training and args.cache == "")

    return TaskData(make("train", True), make("test", False), splits["train"]["count"],
                    splits["test"]["count"], "real (prepared shards)", class_names=retinal_oct.CLASS_NAMES,
                    eval_labels=splits["test"]["labels_in_order"],
                    train_class_counts=splits["train"]["class_counts"], serving_input_fn=serving,
                    report={"records_dir": args.records_dir, **_cache_report(args)},
                    train_input_at=lambda skip: make("train", True, skip))


def dataset_root(data_dir):
    """Returns retinal_oct.ensure_dataset's root, a local one by its real path: the caches and shards keyed
    by its files are then one for any spelling of the folder (oct/, ./oct, a link to it)."""
    root = retinal_oct.ensure_dataset(data_dir)
    return root if storage.is_url(root) else os.path.realpath(root)


def prepare_records(data_dir, out_dir, image_size, on_bad_image="fail", num_shards=(16, 2), seed=0):
    """Writes the OCT train and test images, resized to `image_size`, as shards in `out_dir` (or
    reuses those already there from the same files and settings); returns (manifest, reused).

    Training images go in an order shuffled with `seed`, so that every shard,
    and every stretch of a shard, mixes the classes as the dataset does; test
    images go in sorted order. The manifest (acquisition.shards) is what
    --records-dir reads.
    """
    root = dataset_root(data_dir)
    scans = {split: image_checks.scan_folder(retinal_oct.split_pattern(root, split), retinal_oct.CLASS_NAMES,
                                             CHANNELS) for split in ("train", "test")}
    image_checks.check_bad_files(scans.values(), on_bad_image, listed_in=storage.join(out_dir, shards.MANIFEST))
    listed = [f for scan in scans.values() for f in scan.files]
    source = {"dataset": retinal_oct.DATASET, "root": root, "files": shards.fingerprint(listed),
              "image_size": image_size, "train_order_seed": seed, "num_shards": list(num_shards)}

    def write_splits(directory):
        entries = {}
        for split, count in zip(("train", "test"), num_shards):
            files, labels = scans[split].good()
            if split == "train":
                order = shards.shuffled_order(len(files), seed)
                files, labels = [files[i] for i in order], [labels[i] for i in order]
            images = image_list.decoded_images(files, (image_size, image_size), CHANNELS)
            entries[split] = shards.write_split(images, labels, directory, split, count,
                                                len(retinal_oct.CLASS_NAMES), keep_order=split == "test")
        return entries, scans["train"].bad_files + scans["test"].bad_files

    return shards.prepare(out_dir, source, (image_size, image_size, CHANNELS), retinal_oct.CLASS_NAMES,
                          write_splits)


def build_model(args, learning_rate):
    """Returns the compiled VGG16 transfer model for the OCT classes: the images job's vgg16 backbone
    with the design's Flatten head, on grayscale scans."""
    try:
        return build_image_classifier("vgg16", len(retinal_oct.CLASS_NAMES), _image_size(args), CHANNELS,
                                      weights=backbone_weights(args.weights, args.init_from), trainable_layers=args.trainable_layers,
                                      learning_rate=learning_rate, input_name=FEATURE_KEY, head="flatten",
                                      optimizer=args.optimizer, weight_decay=args.weight_decay)
    except ValueError as e:  # --trainable-layers beyond the backbone
        raise UsageError(str(e)) from None


def input_variant(args, variant, batch_size, workdir):
    """Returns (input_fn, warm-up steps it needs at least) of the benchmark's input variant: the job's
    JPEG pipeline ('pipeline', with libjpeg's reduced decoding, or cached in memory: timed after its
    first epoch), its prepared shards ('records', made once in `workdir`), the write-up's ('design')
    or a bare decode loop ('bare')."""
    size = (args.image_size, args.image_size)
    root = retinal_oct.ensure_dataset(args.data_dir)
    pattern = retinal_oct.split_pattern(root, "train")
    if variant == "design":
        return baselines.design_image_input_fn(pattern, retinal_oct.CLASS_NAMES, size, batch_size,
                                               feature_key=FEATURE_KEY), 0
    if variant == "bare":
        return baselines.bare_decode_input_fn(pattern, size, batch_size), 0
    if variant == "records":
        manifest, _ = prepare_records(args.data_dir, os.path.join(workdir, f"records-{size[0]}"), size[0],
                                      on_bad_image="skip")
        return records.make_image_records_input_fn(manifest["splits"]["train"]["pattern"], size + (CHANNELS,),
                                                   len(retinal_oct.CLASS_NAMES), batch_size, True, FEATURE_KEY), 0
    cached = variant == "pipeline-cached"
    input_fn = image_folder.make_input_fn(image_folder.ImageFolderConfig(
        pattern, retinal_oct.CLASS_NAMES, size, batch_size, training=True, on_bad_image="skip",
        fast_decode=variant == "pipeline-reduced", cache="" if cached else None, feature_key=FEATURE_KEY))
    return input_fn, math.ceil(len(tf.io.gfile.glob(pattern)) / batch_size) + 1 if cached else 0
