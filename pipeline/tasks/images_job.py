"""The images job's data and model: a folder of class folders, split (or split already) into
train and test, read by image_list's input, and a models.backbones classifier. Its command line:
images.py."""
import collections
import dataclasses
import functools
import json
import logging
import os
from typing import Callable, Dict, List, Optional, Tuple

import tensorflow as tf

from acquisition import class_folders, image_checks, storage
from input_fns import decode, image_list, synthetic
from acquisition.errors import InputDataError
from acquisition.files import write_json_atomically, write_text_atomically
from acquisition.image_formats import describe_unread
from models import SCRATCH_MODELS
from models.backbones import build_image_classifier
from models.scratch import moving_statistics_momentum
from pipeline import undecodable
from pipeline.errors import FlagError
from pipeline.initial_weights import check_same_classes
from pipeline.tasks import FEATURE_KEY, FILE_KEY, VALIDATION_FILES, TaskData, backbone_weights, \
    check_data_dir_given, trained_validation_list, write_validation_files
from pipeline.training_record import layers_on_record
from pipeline.validation.split import check_init_from_validation, listed_validation, same_images, shared_images, \
    split_off_validation, warn_of_twins

log = logging.getLogger(__name__)

SPLIT_DIR = "split"  # in the model dir: train.txt and test.txt (one path per line), split.json
SYNTHETIC_CLASSES, SYNTHETIC_SIZES = 10, {"train": 10000, "test": 2000}
# The export takes image files under SERVING_KEY (serving_default) and decoded uint8 pixels [n, size, size,
# channels] under PIXELS_KEY (decode.PIXELS_SIGNATURE: what a TFLite conversion takes, see serving.tflite).
SERVING_KEY, PIXELS_KEY = "image_bytes", "pixels"


@dataclasses.dataclass
class Dataset:
    """The job's data: class names, channels, and each split's (files, labels)."""
    class_names: Tuple[str, ...]
    channels: int
    splits: Dict[str, Tuple[List[str], List[int]]]
    report: dict
    # Writes the split to the model dir, when it is not there yet; see save_split.
    pending_write: Optional[Callable[[], str]] = None
    # The links and copies among the images, when the split was made here (see split.same_images).
    twins: Optional[Dict[str, str]] = None

    def save_split(self):
        """Writes the split to <model dir>/split unless it is there already (or the model dir is not: see
        write_split). Training's input does it on its first call (see prepare_data): a run that fails
        before training leaves the model dir as it was."""
        if self.pending_write and self.pending_write() is not None:
            self.pending_write = None

    def train_class_counts(self):
        """Returns the training images per class, in class_names order."""
        counts = collections.Counter(self.splits["train"][1])
        return [counts[i] for i in range(len(self.class_names))]


_DATASETS = {}  # prepare_data and build_model read the folder once between them


def load_dataset(args):
    """Returns the Dataset of args.data_dir (scanned once per process for the same flags)."""
    check_data_dir_given(args)
    key = (storage.absolute(args.data_dir), args.channels, args.test_fraction, args.split_seed, args.group_by,
           args.on_bad_image, storage.absolute(args.model_dir), frozenset(undecodable.left_out(args.model_dir)))
    if key not in _DATASETS:
        _DATASETS[key] = _load(args)
    return _DATASETS[key]


def _load(args):
    # Absolute file names from here on: test_scores.csv, results.json and the split's lists name the images
    # wherever they are read from, as the OCT job's do.
    data_dir = storage.absolute(args.data_dir)
    folders = class_folders.scan_class_folders(data_dir, args.channels)
    left_out = undecodable.left_out(args.model_dir)
    if left_out:
        folders = dataclasses.replace(folders, scans={s: scan.with_problems(left_out)
                                                      for s, scan in folders.scans.items()})
    image_checks.check_bad_files(folders.scans.values(), args.on_bad_image)
    problems = {f: p for scan in folders.scans.values() for f, p in scan.problems.items()}
    if folders.presplit and "test_fraction" in getattr(args, "explicit_flags", ()):
        raise FlagError(f"--test-fraction {args.test_fraction:g}: {args.data_dir} holds train and test folders, and "
                        "its test folder is the test split; drop --test-fraction (or pass a folder of class folders)")
    saved = read_split(args.model_dir, args.data_dir)
    if saved:
        _check_split_flags(saved, args, folders.presplit)
        _check_same_classes(saved, folders.class_names, args)
    channels = args.channels or (saved or {}).get("channels") or (1 if folders.gray else 3)
    channels_reason = ("--channels" if args.channels else "the model dir's split" if (saved or {}).get("channels")
                       else "every image is gray" if folders.gray else "some images are in colour; a GIF counts as one")
    duplicates = [os.path.join(data_dir, f) for f in (saved or {}).get("duplicates_left_out", [])]
    twins = None
    if saved:
        splits = _splits_from_lists(folders, data_dir, args.model_dir, duplicates, left_out)
    elif folders.presplit:
        splits, duplicates = _without_test_duplicates({s: folders.scans[s].good() for s in class_folders.SPLITS},
                                                       folders.class_names)
        _warn_of_groups_on_both_sides(splits, args.group_by)
    else:
        splits, twins = _split_here(folders, args)
    _warn_of_unread_folders(folders.unread_folders, getattr(args, "validation_dir", None))
    _warn_of_images_left_out(folders, "the class folders")
    if getattr(args, "init_from", None) and not tf.train.latest_checkpoint(args.model_dir):  # (a resume ignores it)
        _check_split_of_init_from(args.init_from, folders.class_names, splits["test"][0])
    split_dir = storage.join(args.model_dir, SPLIT_DIR)
    pending = None if saved else functools.partial(write_split, args.model_dir, args.data_dir, folders, splits,
                                                    channels, args, duplicates)
    report = {"data_root": storage.absolute(args.data_dir), "class_names": list(folders.class_names),
              "layout": "train and test folders" if folders.presplit else "class folders, split here",
              "split_dir": storage.absolute(split_dir), "channels": channels,
              "channels_reason": channels_reason,
              "ignored_files": folders.ignored_files, "unread_image_files": folders.unread_images,
              "loose_image_files": len(folders.loose_images), "skipped_files": sorted(problems),
              "skipped_file_problems": problems, "duplicates_left_out": duplicates,
              "undecodable_left_out": _trained_left_out(args, left_out) if saved else []}
    return Dataset(folders.class_names, channels, splits, report, pending, twins)


def _split_here(folders, args):
    """Returns ({'train': (files, labels), 'test': (files, labels)}, the images' twins): --test-fraction of each
    class of the class folders' good images drawn to test (seeded, grouped by --group-by), an image's links
    and copies trained with it (see split.same_images)."""
    files, labels = folders.scans["all"].good()
    twins = same_images(files)
    warn_of_twins(twins, bool(args.group_by), dict(zip(files, labels)), folders.class_names)
    entries = class_folders.split_files(files, labels, args.test_fraction, args.split_seed, args.group_by,
                                        class_names=folders.class_names, twins=twins)
    return {s: ([f for f, _ in entries[s]], [label for _, label in entries[s]]) for s in class_folders.SPLITS}, twins


def _without_test_duplicates(splits, class_names):
    """Returns (`splits` (your own train/ and test/ folders') without the training files that are test images
    too, as links to them or copies of them, and those files, sorted): the test figures would count images
    the model trained on. Says so in one line when there are any; raises InputDataError when a class of
    `class_names` would be left with no training image."""
    shared = shared_images(splits["test"][0], splits["train"][0])
    if not shared:
        return splits, []
    left_out = {trained for trained, _ in shared}
    kept = [(f, label) for f, label in zip(*splits["train"]) if f not in left_out]
    _check_every_class_trained(splits["train"], kept, shared, class_names)
    trained, tested = shared[0]
    log.warning("%d training image%s a test image too, as a link or a copy (%s is %s): left out of training, so "
                "that the test figures count no image the model trained on; results.json lists %s "
                "(duplicates_left_out)", len(left_out), " is" if len(left_out) == 1 else "s are",
                image_checks.shown_path(trained), image_checks.shown_path(tested),
                "it" if len(left_out) == 1 else "them")
    return {**splits, "train": ([f for f, _ in kept], [label for _, label in kept])}, sorted(left_out)


def _warn_of_groups_on_both_sides(splits, group_pattern):
    """Says in one line when your own train/ and test/ (`splits`) hold files of one --group-by group (a
    patient): the folders are used as they are, so the test figures count a group the model trained on."""
    if not group_pattern:
        return
    groups = {side: {class_folders.group_of(f, group_pattern) for f in splits[side][0]} - {None}
              for side in class_folders.SPLITS}
    shared = sorted(groups["train"] & groups["test"])
    if shared:
        one = len(shared) == 1
        log.warning("%d --group-by group%s in both train/ and test/ (%s%s): your folders are used as they are, so "
                    "the test figures count %s the model trained on; move %s files into one of them", len(shared),
                    " is" if one else "s are", ", ".join(shared[:3]), ", ..." if len(shared) > 3 else "",
                    "a group" if one else "groups", "its" if one else "each one's")


def _check_every_class_trained(training, kept, shared, class_names):
    """Raises InputDataError when a class of `training` ((files, labels)) has no file among `kept` ([(file,
    label)]): every training image of it is a test image too (`shared`: [(training file, test file)])."""
    lost = sorted(set(training[1]) - {label for _, label in kept})
    if lost:
        label_of = dict(zip(*training))
        trained, tested = next((t, s) for t, s in shared if label_of[t] == lost[0])
        raise InputDataError(f"every training image of class {class_names[lost[0]]!r} is a test image too, as a link "
                             f"or a copy ({image_checks.shown_path(trained)} is {image_checks.shown_path(tested)}), so "
                             "it would not be trained on; add images of it to train/ that test/ does not hold")


def _warn_of_unread_folders(unread, validation_dir):
    """Logs one line for each of `unread` (a split data dir's val/ or validation/) that --validation-dir
    (`validation_dir`) does not name: users who ship one expect it to be validated on."""
    for folder in unread:
        if not validation_dir or not storage.same_folder(validation_dir, folder):
            log.warning("%s is not read: this job trains on train/ and tests on test/; pass --validation-dir %s "
                        "to validate on its images", folder, folder)


def _warn_of_images_left_out(folders, where, use="train on"):
    """Logs one line for the ClassFolders `folders`' pictures in formats no job reads, and one for its images
    beside the class folders (`where`, in words): a user who put them there expects them used."""
    if folders.unread_images:
        log.warning("%d files in %s are pictures in formats this job cannot read (%s) and are left out; convert "
                    "them to PNG or JPEG to %s them", sum(folders.unread_images.values()), where,
                    describe_unread(folders.unread_images), use)
    if folders.loose_images:
        log.warning("%d image(s) lie beside %s, in none of them, and are left out (the first: %s); move each into "
                    "its class's folder to %s it", len(folders.loose_images), where,
                    image_checks.shown_path(folders.loose_images[0]), use)


def _check_split_of_init_from(init_from, class_names, test_files):
    """Raises FlagError when the images job's run in `init_from` (--init-from) was split from other classes
    than `class_names` (its split.json, written before it trained, names them: a run stopped before its
    results is caught too), or trained on any of this run's `test_files`: the test figures would count
    images the starting weights learned."""
    try:
        classes = json.loads(storage.read_text(storage.join(init_from, SPLIT_DIR, "split.json"))).get("class_names")
    except (OSError, ValueError, AttributeError):
        return  # not an images job's run (its own check of the model comes later), or no split kept
    check_same_classes(init_from, classes, class_names)
    trained = _training_side_of(init_from)
    leaked = shared_images(trained or [], test_files)  # by path, link or copy: another data dir may hold copies
    if leaked:
        raise FlagError(f"--init-from {init_from} trained on {len(leaked)} of this run's {len(test_files)} test "
                        f"images ({leaked[0][0]}, ...): its split differs; split as it was (its --split-seed, "
                        "--test-fraction, --group-by and --data-dir, in its split/split.json), or start from a run "
                        "that never saw them")


def _training_side_of(init_from, without_validation=False):
    """Returns the files of the training side of the images job's run in `init_from` (its split/train.txt), without
    those it held out for validation (its VALIDATION_FILES) when `without_validation`; None where it kept none."""
    try:
        source_root = json.loads(storage.read_text(storage.join(init_from, SPLIT_DIR, "split.json")))["data_dir"]
        trained = class_folders.read_split_list(storage.join(init_from, SPLIT_DIR, "train.txt"), source_root)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    held = set(listed_validation(storage.join(init_from, VALIDATION_FILES)) or ()) if without_validation else ()
    return [f for f in trained if storage.absolute(f) not in held]


def read_split(model_dir, data_dir):
    """Returns the split.json an earlier run of this model dir wrote, or None; raises FlagError when
    it was made from another data dir."""
    path = storage.join(model_dir, SPLIT_DIR, "split.json")
    try:
        saved = json.loads(storage.read_text(path))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise InputDataError(f"cannot read {path} ({e}); remove the folder {os.path.dirname(path)} to split "
                             "again, or pass another --model-dir") from None
    if not saved.get("data_dir") or not storage.same_folder(saved["data_dir"], data_dir):  # (through a link too)
        raise FlagError(f"the model dir {model_dir} was trained on {saved.get('data_dir')}, not {data_dir}; pass "
                         "that --data-dir, or another --model-dir")
    return saved


def _check_split_flags(saved, args, presplit):
    """Raises FlagError when the flags ask for another split than the one the model dir holds."""
    asked = {"--channels": (args.channels, saved.get("channels"))}
    if not presplit:
        asked.update({"--test-fraction": (args.test_fraction, saved.get("test_fraction")),
                      "--split-seed": (args.split_seed, saved.get("split_seed")),
                      "--group-by": (args.group_by, saved.get("group_by"))})
    for flag, (value, was) in asked.items():
        if value != was and not (flag == "--channels" and value is None):
            fix = f"drop {flag}" if was is None else f"pass {flag}={was}"
            raise FlagError(f"the model dir {args.model_dir} was split {_with_flag(flag, was)}, not "
                            f"{_with_flag(flag, value)}; {fix} to go on with it, or pass another --model-dir for "
                            "a new split")


def _check_same_classes(saved, class_names, args):
    """Raises InputDataError when the data dir's class folders are not those the model dir was split with:
    the labels, and the model's outputs, would be another classification."""
    then = saved.get("class_names")
    if then is None or list(class_names) == then:
        return
    new, gone = [n for n in class_names if n not in then], [n for n in then if n not in class_names]
    change = "; ".join(part for part in (f"new: {', '.join(new)}" if new else "",
                                         f"gone: {', '.join(gone)}" if gone else "") if part)
    raise InputDataError(f"the class folders of {args.data_dir} are not those the model dir {args.model_dir} was "
                         f"trained on ({change}): its labels and outputs are those {len(then)} "
                         f"classes; put the folders back as they were, or pass another --model-dir to train on "
                         f"these {len(class_names)}")


def _with_flag(flag, value):
    return f"without {flag}" if value is None else f"with {flag}={value}"


def _trained_left_out(args, left_out):
    """Returns the images of the model dir's training split (its validation share not) that a run could not
    decode (`left_out`: see pipeline.undecodable.left_out)."""
    listed = class_folders.read_split_list(storage.join(args.model_dir, SPLIT_DIR, "train.txt"), args.data_dir)
    return undecodable.left_out_of_training(left_out, listed,
                                            listed_validation(trained_validation_list(args.model_dir)))


def _splits_from_lists(folders, data_dir, model_dir, duplicates=(), undecodable=()):
    """Returns the splits listed in the model dir, minus files now skipped as bad and the `undecodable` ones
    (absolute paths: see pipeline.undecodable.left_out) gone since: paths under `data_dir`, as the scan names
    them (read_split checked that it is the same folder). `duplicates`, the training copies
    of test images the split left out, are not new images."""
    label_of = {f: label for scan in folders.scans.values() for f, label in zip(*scan.good())}
    bad = {f for scan in folders.scans.values() for f in scan.problems}
    splits, listed = {}, set(duplicates)
    for split in class_folders.SPLITS:
        path = storage.join(model_dir, SPLIT_DIR, f"{split}.txt")
        files = [f for f in class_folders.read_split_list(path, data_dir)
                 if f not in bad and os.path.abspath(f) not in undecodable]
        gone = [f for f in files if f not in label_of]
        if gone:
            raise InputDataError(f"{gone[0]}, listed in {path}, is no longer an image of the data dir"
                                 f"{f' (and {len(gone) - 1} more)' if len(gone) > 1 else ''}; restore it, or "
                                 "pass another --model-dir to split the folder anew")
        splits[split] = (files, [label_of[f] for f in files])
        listed.update(files)
    new = len(set(label_of) - listed)
    if new:
        log.warning("%d image%s added to the data dir after this model dir's split was made; %s left out "
                    "(another --model-dir splits the folder anew)", new, " was" if new == 1 else "s were",
                    "it is" if new == 1 else "they are")
    return splits


def write_split(model_dir, data_dir, folders, splits, channels, args, duplicates=()):
    """Writes the split to <model_dir>/split: train.txt and test.txt, then split.json (written last:
    a split is whole when it exists); returns the folder, or None when there is no model dir (a tool
    that reads the job's input, such as inspect_input.py, names none: training has made it by now)."""
    if not storage.isdir(model_dir):
        return None
    out = storage.join(model_dir, SPLIT_DIR)
    storage.makedirs(out)
    for split, (files, _) in splits.items():  # each worker of a cluster may write the same lists
        write_text_atomically(storage.join(out, f"{split}.txt"),
                              class_folders.split_list_text(files, storage.absolute(data_dir)))
    write_json_atomically(storage.join(out, "split.json"), {
        "data_dir": storage.absolute(data_dir), "class_names": list(folders.class_names), "channels": channels,
        "presplit": folders.presplit, "test_fraction": None if folders.presplit else args.test_fraction,
        "split_seed": args.split_seed, "group_by": args.group_by,
        "counts": {s: len(files) for s, (files, _) in splits.items()},
        "duplicates_left_out": class_folders.split_list_text(duplicates, storage.absolute(data_dir)).splitlines()})
    return out


def balanced_class_weights(counts):
    """Returns n / (classes x count) for each class count: 1 for every class when they are equal."""
    total = sum(counts)
    return [total / (len(counts) * c) for c in counts]


def prepare_data(args, batch_size):
    """Returns TaskData over the folder's train and test splits (or synthetic images)."""
    size = (args.image_size, args.image_size)
    if args.synthetic:
        if args.class_weight == "balanced":
            raise FlagError("--class-weight balanced weighs each class by its count of training images, and "
                            "--synthetic data (one generated batch repeated) has no classes to count; drop one of "
                            "the two")
        channels = args.channels or 3
        names = tuple(f"class_{i}" for i in range(SYNTHETIC_CLASSES))

        def make(training, split):
            return synthetic.make_input_fn(size + (channels,), SYNTHETIC_CLASSES, batch_size, training,
                                           feature_key=FEATURE_KEY, num_examples=SYNTHETIC_SIZES[split],
                                           dtype=tf.uint8)
        return TaskData(make(True, "train"), make(False, "test"), SYNTHETIC_SIZES["train"], SYNTHETIC_SIZES["test"],
                        "synthetic", class_names=names, serving_input_fn=_serving(size, channels),
                        report=_model_report(args), recipe_values=backbone_settings(args))
    data = load_dataset(args)

    def make(split, training, skip=0, file_key=None):
        files, labels = data.splits[split]
        return image_list.make_input_fn(image_list.ImageListConfig(
            files, labels, len(data.class_names), size, data.channels, batch_size, training,
            feature_key=FEATURE_KEY, seed=args.seed, skip=skip, file_key=file_key))

    report = {**data.report, **_model_report(args)}
    held_out = validation_sides(args, data)
    if held_out and getattr(args, "init_from", None) and not tf.train.latest_checkpoint(args.model_dir):
        # (a resume reads no --init-from)
        trained = _training_side_of(args.init_from, without_validation=True) or []
        leaked = [f for f, _ in shared_images(trained, held_out["validation"][0])]
        check_init_from_validation(args.init_from, leaked, held_out["validation"][0],
                                   "--validation-fraction and --split-seed")
    if held_out:
        data = dataclasses.replace(data, splits={**data.splits, **held_out})
        report["validation_files"] = storage.absolute(storage.join(args.model_dir, VALIDATION_FILES))
    if args.class_weight == "balanced":
        report["class_weights"] = balanced_class_weights(data.train_class_counts())

    def train_input_at(skip=0):
        read_train = make("train", True, skip)

        def train_input_fn(input_context=None):  # the Estimator calls it once every check before training passed
            data.save_split()
            if held_out:
                write_validation_files(args.model_dir, held_out["validation"][0])
            return read_train(input_context)
        return train_input_fn

    return TaskData(train_input_at(), make("test", False, file_key=FILE_KEY), len(data.splits["train"][0]),
                    len(data.splits["test"][0]), "real", class_names=data.class_names,
                    eval_labels=data.splits["test"][1], train_class_counts=data.train_class_counts(),
                    serving_input_fn=_serving(size, data.channels), report=report,
                    validation_input_fn=make("validation", False) if held_out else None,
                    validation_files=held_out["validation"][0] if held_out else None,
                    recipe_values=backbone_settings(args),
                    num_validation_examples=len(held_out["validation"][0]) if held_out else 0,
                    train_input_at=train_input_at)


def validation_sides(args, data):
    """Returns {'train': (files, labels), 'validation': (files, labels)} of the folder dataset `data`:
    --validation-dir's images, or --validation-fraction of the training split's (seeded by --split-seed,
    stratified, grouped by --group-by, a training image's links and copies kept in training); None with
    neither (see pipeline.validation.split)."""
    def read_dir(folder):
        return _validation_dir(folder, data.class_names, data.channels, args.on_bad_image,
                               undecodable.left_out(args.model_dir))
    twins, listed = None, listed_validation(trained_validation_list(args.model_dir))
    if args.validation_fraction and not args.validation_dir and listed is None:
        # (A --validation-dir holding training images is refused. The OCT job's split, by patient, is not searched
        # for copies: it would read the first 4 KB of most of its 83,484 scans, and some whole, at each start.)
        training = set(data.splits["train"][0])
        if data.twins is not None:  # (found as this run split its data; said then)
            twins = {f: twin for f, twin in data.twins.items() if f in training}
        else:
            twins = same_images(data.splits["train"][0])
            warn_of_twins(twins, bool(args.group_by), dict(zip(*data.splits["train"])), data.class_names)
    return split_off_validation(args, *data.splits["train"], read_dir, args.split_seed, args.group_by,
                                data.class_names, test_files=data.splits["test"][0], twins=twins, listed=listed)


def _validation_dir(folder, class_names, channels, on_bad_image, undecodable):
    """Returns (files, labels) of the class folders in `folder`, labelled by the training classes; the
    `undecodable` ones (see pipeline.undecodable.left_out) count as bad files."""
    folders = class_folders.scan_class_folders(storage.absolute(folder), channels, flag="--validation-dir")
    scan = folders.scans
    _warn_of_images_left_out(folders, f"the class folders of --validation-dir {folder}", "validate on")
    if "all" not in scan:
        raise FlagError(f"--validation-dir {folder} holds train and test folders; pass a folder of class folders")
    found = scan["all"].with_problems(undecodable)
    unknown = sorted(set(found.class_names) - set(class_names))
    if unknown:
        raise InputDataError(f"--validation-dir {folder} has class folder(s) {', '.join(unknown)} that training "
                             "does not; every validation class needs training images")
    absent = [n for n in class_names if n not in found.class_names]
    if absent:  # (a class folder there without images is refused by the scan, as the OCT job refuses both)
        raise InputDataError(f"--validation-dir {folder} has no folder for class(es) "
                             f"{', '.join(repr(n) for n in absent)}, which training has: the validation accuracy "
                             "that picks the best model would not see them; add their validation images in one, or "
                             "pass --validation-fraction instead")
    image_checks.check_bad_files([found], on_bad_image)
    files, labels = found.good()
    return files, [class_names.index(found.class_names[label]) for label in labels]


def _serving(size, channels):
    return decode.make_serving_input_fn(size, channels, feature_key=FEATURE_KEY, bytes_key=SERVING_KEY,
                                        pixels_key=PIXELS_KEY)


def backbone_settings(args):
    """Returns {'weights', 'trainable_layers'} the images job builds its backbone with: --weights, else
    imagenet for the tf.keras.applications backbones and none for the networks trained from scratch (and
    none with --init-from, whose checkpoint sets every weight); --trainable-layers, else None (all of them)
    with --weights none and 0 (the head only) with pretrained weights (by --weights, whether --init-from
    replaces them or not). Values already resolved come back as they are."""
    weights = args.weights or ("none" if args.model in SCRATCH_MODELS else "imagenet")
    trainable = args.trainable_layers
    if trainable is None and weights != "none":
        trainable = 0  # pretrained: the head learns first
    return {"weights": backbone_weights(weights, getattr(args, "init_from", None)), "trainable_layers": trainable}


def _model_report(args):
    """Returns results.json's fields of the network trained: --model, its --weights and its trainable layers."""
    backbone = backbone_settings(args)
    return {"model": args.model, "weights": backbone["weights"],
            "trainable_layers": layers_on_record(backbone["trainable_layers"])}


def planned_steps(schedule):
    """Returns the global step a run's learning-rate `schedule` (a models.learning_rate.ScheduledRate) ends at:
    the steps trained in all, a resume's earlier ones at their own batch included; None for a fixed rate."""
    if not hasattr(schedule, "total_images"):
        return None
    return schedule.step_at(schedule.total_images)


def build_model(args, learning_rate):
    """Returns the compiled classifier --model names, for the folder's classes and channels."""
    if args.synthetic:
        num_classes, channels, class_weights = SYNTHETIC_CLASSES, args.channels or 3, None
    else:
        data = load_dataset(args)
        num_classes, channels = len(data.class_names), data.channels
        class_weights = balanced_class_weights(data.train_class_counts()) if args.class_weight == "balanced" \
            else None
    try:
        return build_image_classifier(args.model, num_classes, (args.image_size, args.image_size), channels,
                                      learning_rate=learning_rate, **backbone_settings(args),
                                      input_name=FEATURE_KEY, class_weights=class_weights,
                                      optimizer=args.optimizer, weight_decay=args.weight_decay,
                                      bn_momentum=moving_statistics_momentum(planned_steps(learning_rate)))
    except ValueError as e:  # --trainable-layers beyond the backbone: known only once it is built
        raise FlagError(str(e)) from None

