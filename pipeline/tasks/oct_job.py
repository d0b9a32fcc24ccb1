"""The retinal OCT job's data and model: OCT2017's JPEG folders (or shards prepared from them,
or synthetic scans) and the VGG16 transfer model. Its command line: oct.py."""
import json
import os

import tensorflow as tf

from input_fns import image_folder, locks, records, retinal_oct, synthetic
from input_fns.errors import InputDataError
from input_fns.files import write_json_atomically
from models.vgg16_transfer import build_vgg16_classifier
from pipeline.errors import UsageError
from pipeline.tasks import FEATURE_KEY, FILE_KEY, TaskData
from pipeline.tasks.oct import PATIENT_PATTERN, TRAIN_EXAMPLES

# OCT2017's split sizes, so that --epochs means the same on synthetic data.
SYNTHETIC_SIZES = {"train": TRAIN_EXAMPLES, "test": 968}
RECORDS_MANIFEST = "manifest.json"
RECORDS_VERSION = 2  # 2: training records in shuffled order
_MANIFEST_KEYS = ("image_size", "counts", "train_class_counts", "test_labels_in_order")
CHANNELS = 1  # the scans are grayscale JPEGs; the model repeats them to 3 channels


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
    serving = image_folder.make_serving_input_fn(size, CHANNELS, fast_decode=args.decode == "reduced",
                                                 feature_key=FEATURE_KEY)
    if args.synthetic:
        def make(training, split):
            return synthetic.make_input_fn(size + (CHANNELS,), len(retinal_oct.CLASS_NAMES), batch_size, training,
                                           feature_key=FEATURE_KEY, num_examples=SYNTHETIC_SIZES[split],
                                           dtype=tf.uint8)
        return TaskData(make(True, "train"), make(False, "test"), SYNTHETIC_SIZES["train"],
                        SYNTHETIC_SIZES["test"], "synthetic", class_names=retinal_oct.CLASS_NAMES,
                        serving_input_fn=serving)
    if args.validation_fraction or args.validation_dir:
        raise UsageError("the oct job has no validation split yet; train OCT2017's train folder with "
                         "scripts/train_images.py --group-by '" + PATIENT_PATTERN + "' for a split by patient, or "
                         "pass --validation-fraction 0")
    if args.records_dir:
        return _records_data(args, batch_size, size, serving)
    root = retinal_oct.ensure_dataset(args.data_dir)
    scans = {split: image_folder.scan_folder(retinal_oct.split_pattern(root, split), retinal_oct.CLASS_NAMES,
                                             CHANNELS)
             for split in ("train", "test")}

    def make(split, training):
        return image_folder.make_input_fn(
            retinal_oct.split_pattern(root, split), retinal_oct.CLASS_NAMES, size, batch_size, training,
            scan=scans[split], on_bad_image=args.on_bad_image, channels=CHANNELS,
            fast_decode=args.decode == "reduced", cache=args.cache if training else None,
            shuffle_buffer=args.shuffle_buffer, feature_key=FEATURE_KEY, seed=args.seed, file_key=FILE_KEY)

    train_input_fn, eval_input_fn = make("train", True), make("test", False)
    skipped = scans["train"].bad_files + scans["test"].bad_files
    problems = {**scans["train"].problems, **scans["test"].problems}
    _, test_labels = scans["test"].good()
    return TaskData(train_input_fn, eval_input_fn, scans["train"].num_good, len(test_labels),
                    "real", class_names=retinal_oct.CLASS_NAMES, eval_labels=test_labels,
                    train_class_counts=list(scans["train"].class_counts().values()),
                    serving_input_fn=serving,
                    report={"data_root": root, "skipped_files": skipped,
                            "skipped_file_problems": problems})


def read_records_manifest(records_dir):
    """Returns the manifest of the shards in `records_dir`; raises InputDataError when it is
    missing, damaged, incomplete or from a version that wrote the training shards in class order."""
    path = os.path.join(records_dir, RECORDS_MANIFEST)
    advice = "make the shards again with scripts/prepare_oct.py"
    try:
        with open(path) as f:
            manifest = json.load(f)
    except (OSError, ValueError) as e:
        raise InputDataError(f"cannot read {path} ({getattr(e, 'strerror', None) or e}); {advice}") from None
    if not isinstance(manifest, dict) or manifest.get("version", 1) < RECORDS_VERSION:
        raise InputDataError(f"the shards in {records_dir} were written in class order by an earlier version, "
                             f"so training would see one class at a time; {advice}")
    missing = [k for k in _MANIFEST_KEYS if k not in manifest]
    missing += [f"counts.{k}" for k in ("train", "test") if k not in (manifest.get("counts") or {})]
    if missing:
        raise InputDataError(f"{path} lacks {', '.join(missing)}; {advice}")
    return manifest


def _records_data(args, batch_size, size, serving):
    manifest = read_records_manifest(args.records_dir)
    if tuple(manifest["image_size"]) != size:
        raise InputDataError(f"the shards in {args.records_dir} hold {manifest['image_size'][0]}-pixel images; "
                             f"pass --image-size {manifest['image_size'][0]} or prepare them again")

    def make(split, training):
        return retinal_oct.make_records_input_fn(
            os.path.join(args.records_dir, f"{split}-*-of-*.tfrecord"), size, batch_size, training,
            channels=CHANNELS, feature_key=FEATURE_KEY, seed=args.seed)

    return TaskData(make("train", True), make("test", False), manifest["counts"]["train"],
                    manifest["counts"]["test"], "real (prepared shards)", class_names=retinal_oct.CLASS_NAMES,
                    eval_labels=manifest["test_labels_in_order"],
                    train_class_counts=manifest["train_class_counts"], serving_input_fn=serving,
                    report={"records_dir": args.records_dir})


def prepare_records(data_dir, out_dir, image_size, on_bad_image="fail", num_shards=(16, 2), seed=0):
    """Writes the OCT train and test images, resized to `image_size`, as TFRecord shards in `out_dir`.

    Training images go in an order shuffled with `seed`, so that every shard,
    and every stretch of a shard, mixes the classes as the dataset does; test
    images go in sorted order. Returns the manifest (also written to
    <out_dir>/manifest.json) that --records-dir reads: image size, counts,
    class counts, the order's seed, and the test labels in reading order.
    """
    root = retinal_oct.ensure_dataset(data_dir)
    os.makedirs(out_dir, exist_ok=True)
    with locks.exclusive(os.path.join(out_dir, ".prepare.lock")):
        records.remove_partial_shards(out_dir)  # of a run that was killed
        return _write_records(root, out_dir, image_size, on_bad_image, num_shards, seed)


def _write_records(root, out_dir, image_size, on_bad_image, num_shards, seed):
    manifest = {"version": RECORDS_VERSION, "image_size": [image_size, image_size], "source": root,
                "train_order_seed": seed, "counts": {}, "skipped_files": []}
    for split, shards in zip(("train", "test"), num_shards):
        scan = image_folder.scan_folder(retinal_oct.split_pattern(root, split), retinal_oct.CLASS_NAMES, CHANNELS)
        image_folder.check_bad_files(scan, on_bad_image)
        order = records.shuffled_order(scan.num_good, seed) if split == "train" else None
        retinal_oct.write_resized_shards(scan, (image_size, image_size), out_dir, split, shards, CHANNELS,
                                         order=order)
        files, labels = scan.good()
        manifest["counts"][split] = len(files)
        manifest["skipped_files"] += scan.bad_files
        if split == "train":
            manifest["train_class_counts"] = list(scan.class_counts().values())
        else:
            # Evaluation reads shard 0, then 1, ...; records went round-robin into them.
            manifest["test_labels_in_order"] = [l for s in range(shards) for l in labels[s::shards]]
    write_json_atomically(os.path.join(out_dir, RECORDS_MANIFEST), manifest)
    return manifest


def build_model(args, learning_rate):
    """Returns the compiled VGG16 transfer model for the OCT classes."""
    return build_vgg16_classifier(len(retinal_oct.CLASS_NAMES), _image_size(args), weights=args.weights,
                                  trainable_layers=args.trainable_layers, learning_rate=learning_rate,
                                  input_name=FEATURE_KEY, input_channels=CHANNELS)

