"""A folder of class folders read as a dataset: DIR/<class>/<image> (split here) or
DIR/{train,test}/<class>/<image> (split by its owner).

The classes are the folders' names, sorted; images are found at any depth
below their class folder. Files without an image extension, and hidden files
(.DS_Store, macOS's ._ files), are not images; Thumbs.db and notes are left
alone the same way, and so are hidden folders and those systems leave beside
files (__MACOSX, a Synology share's @eaDir: see storage.SYSTEM_FOLDERS). Each
image's headers are checked (see image_formats), so bad files are known before
training.
"""
import collections
import dataclasses
import hashlib
import os
import random
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Dict, Tuple

from acquisition import storage
from acquisition.errors import InputDataError
from acquisition.image_checks import NOT_UTF8, FolderScan, has_line_break, is_not_utf8, shown_path
from acquisition.image_formats import check_image, is_image_name, unread_images

SPLITS = ("train", "test")
# The model dir lists each split's files one a line, and an export its class names: a name over two
# lines would come back as two.
_LINE_BREAK_IN_NAME = "has a line break in its name, which the model dir's split files cannot list (rename it)"
_VALIDATION_FOLDERS = frozenset({"validation", "val", "valid"})  # lowercased: beside train and test, not read
_SPLIT_FOLDERS = frozenset(SPLITS) | _VALIDATION_FOLDERS


@dataclasses.dataclass
class ClassFolders:
    """The images under a data dir: by split when the dir is split already, else all under 'all'."""
    root: str
    class_names: Tuple[str, ...]
    scans: Dict[str, FolderScan]  # 'train' and 'test', or 'all'
    gray: bool  # every good image is grayscale
    ignored_files: int  # files that are not images by their names
    unread_folders: Tuple[str, ...] = ()  # a split dir's val/ or validation/, which its layout does not read
    unread_images: Dict[str, int] = dataclasses.field(default_factory=dict)  # of ignored_files: '.webp': 4, ...
    loose_images: Tuple[str, ...] = ()  # images beside the class folders, in none of them

    @property
    def presplit(self):
        """Returns whether the folder came split into train and test."""
        return "all" not in self.scans


def walk_images(folder):
    """Returns (the image files below `folder`, linked folders' included, sorted, and the names of the other files
    it holds)."""
    images, others = [], []
    for parent, _, names in storage.walk(folder):
        for name in names:
            if is_image_name(name):
                images.append(storage.join(parent, name))
            else:
                others.append(name)
    return sorted(images), others


def _class_dirs(folder):
    if storage.is_url(folder):
        return sorted(n for n in storage.listdir(folder)
                      if storage.is_data_folder(n) and storage.isdir(storage.join(folder, n)))
    return sorted(e.name for e in os.scandir(folder) if e.is_dir() and storage.is_data_folder(e.name))


def _scan(folder, class_names, channels, workers):
    files, labels, ignored = [], [], []
    for index, name in enumerate(class_names):
        found, others = walk_images(storage.join(folder, name)) if storage.isdir(storage.join(folder, name)) \
            else ([], [])
        files += found
        labels += [index] * len(found)
        ignored += others
    with ThreadPoolExecutor(workers) as pool:  # the checks wait on the disk, not the CPU
        try:
            checks = list(pool.map(lambda f: check_image(f, channels), files, chunksize=256))
        except BaseException:
            # A stop signal (or a failure) drops the checks not begun. Executor.map's iterator cancels them only
            # once it has started: a stop that came while map still submitted them (a loaded machine's first
            # seconds, thousands of files) left every one submitted to be checked on the way out.
            pool.shutdown(wait=False, cancel_futures=True)
            raise
    digest = hashlib.sha256()
    for f, check in zip(files, checks):
        digest.update(f"{f}\0{check.size}\0{check.mtime_ns}\n".encode("utf-8", "surrogateescape"))
    problems = {f: c.problem for f, c in zip(files, checks) if c.problem}
    problems.update({f: _LINE_BREAK_IN_NAME for f in files if has_line_break(f)})
    problems.update({f: NOT_UTF8 for f in files if is_not_utf8(f[len(folder):])})  # (the folder's own: read_layout)
    gray = all(c.gray for c in checks if not c.problem)
    return FolderScan(files, labels, problems, tuple(class_names), digest.hexdigest()), gray, ignored


@dataclasses.dataclass(frozen=True)
class Layout:
    """A data dir's class folders as its folders name them, before any image is read."""
    class_names: Tuple[str, ...]
    folders: Dict[str, str]  # 'train' and 'test' (a split dir), or 'all': the folders holding the class folders
    unread_folders: Tuple[str, ...]  # a split dir's val/ or validation/, which its layout does not read


def read_layout(data_dir, flag="--data-dir"):
    """Returns the Layout of `data_dir` from its folders' names alone (no image is read, no TensorFlow imported:
    a wrong --data-dir is answered at once).

    Raises InputDataError when the dir is missing, has fewer than 2 class folders, or a test class unknown to
    training; the fixes it names pass the folder as `flag`.
    """
    if not storage.isdir(data_dir):
        raise InputDataError(f"no folder {data_dir}; pass {flag} with a folder of class folders "
                             "(DIR/<class>/<image>)")
    if is_not_utf8(data_dir):
        raise InputDataError(f"{'the data dir' if flag == '--data-dir' else flag} {shown_path(data_dir)} {NOT_UTF8}")
    top = {d.lower(): d for d in _class_dirs(data_dir)}
    presplit = all(s in top for s in SPLITS) and set(top) <= _SPLIT_FOLDERS
    if not presplit:
        _check_not_split_folders(data_dir, top, flag)
    layout = _split_layout(data_dir, top) if presplit else Layout(tuple(top.values()), {"all": data_dir}, ())
    broken = next((n for n in layout.class_names if has_line_break(n)), None)
    if broken is not None:
        where = storage.join(layout.folders.get("train", data_dir), broken)
        raise InputDataError(f"class folder {shown_path(where)} has a line break in its name, which the export's "
                             "list of class names cannot hold; rename it")
    garbled = next((n for n in layout.class_names if is_not_utf8(n)), None)
    if garbled is not None:
        where = storage.join(layout.folders.get("train", data_dir), garbled)
        raise InputDataError(f"class folder {shown_path(where)} {NOT_UTF8}")
    if len(layout.class_names) < 2:
        raise _too_few_classes(layout.folders.get("train", data_dir), layout.class_names, presplit, flag)
    return layout


def _split_layout(data_dir, top):
    """Returns the Layout of `data_dir`, split into train and test folders (`top`: {lowercased: name})."""
    class_names = tuple(_class_dirs(storage.join(data_dir, top["train"])))
    test_classes = set(_class_dirs(storage.join(data_dir, top["test"])))
    extra = sorted(test_classes - set(class_names))
    if extra:
        raise InputDataError(f"{os.path.join(data_dir, top['test'])} has class folder(s) {', '.join(extra)} "
                             "that train does not; every test class needs training images")
    absent = [n for n in class_names if n not in test_classes]
    if absent:
        raise InputDataError(f"{os.path.join(data_dir, top['test'])} has no folder for class(es) "
                             f"{', '.join(repr(n) for n in absent)}, which train has; add its test images in "
                             "one, or take the class out of train")
    return Layout(class_names, {s: storage.join(data_dir, top[s]) for s in SPLITS},
                  tuple(storage.join(data_dir, top[s]) for s in sorted(set(top) - set(SPLITS))))


def _too_few_classes(folder, class_names, presplit, flag):
    """Returns the InputDataError for `folder`, holding fewer than 2 `class_names`: where its loose images are a
    class's, says which folder to pass."""
    loose = sum(1 for name in storage.listdir(folder) if is_image_name(name))
    if loose and not class_names and presplit:
        return InputDataError(f"{folder} holds {loose} image(s) and no class folders; train/ and test/ each "
                              "need one folder of images per class (train/<class>/<image>)")
    if loose and not class_names:
        parent = os.path.dirname(storage.absolute(folder).rstrip("/"))
        return InputDataError(f"{folder} holds {loose} image(s) and no class folders: it looks like one class's "
                              f"folder; pass {flag} {parent}, whose every folder is a class, if that is the "
                              "dataset")
    return InputDataError(f"{folder} holds {len(class_names)} class folder(s); "
                          "a classifier needs at least 2 (one folder of images per class)")


def scan_class_folders(data_dir, channels=None, workers=4, flag="--data-dir"):
    """Returns the ClassFolders of `data_dir` (see read_layout), each image checked for decoding to `channels`
    (1, 3 or None: its own).

    Raises InputDataError as read_layout does (naming `flag`), and for a class without images.
    """
    layout = read_layout(data_dir, flag)
    scans, gray, ignored, loose = {}, True, [], []
    for split, folder in layout.folders.items():
        scans[split], split_gray, split_ignored = _scan(folder, layout.class_names, channels, workers)
        gray, ignored = gray and split_gray, ignored + split_ignored
        loose += [storage.join(folder, n) for n in sorted(storage.listdir(folder))
                  if is_image_name(n) and not storage.isdir(storage.join(folder, n))]
        empty = [n for n, c in scans[split].class_counts().items() if c == 0]
        if empty:
            raise InputDataError(f"no readable images of class {', '.join(repr(n) for n in empty)} in {folder} "
                                 "(JPEG, PNG, BMP or GIF); add some or remove the folder")
    return ClassFolders(data_dir, layout.class_names, scans, gray, len(ignored), layout.unread_folders,
                        unread_images(ignored), tuple(loose))


def _check_not_split_folders(data_dir, top, flag):
    """Raises InputDataError when the folders of `data_dir` ({lowercased: name}), not a train/test layout,
    look like one (train/ with val/ and no test/, say): they would be trained as classes. One class called
    train or test among others is a class."""
    named = sorted(top[n] for n in set(top) & _SPLIT_FOLDERS)
    others = sorted(top[n] for n in set(top) - _SPLIT_FOLDERS)
    if len(named) == 1:
        _check_not_a_split_among_classes(data_dir, named[0], others)
    if len(named) < 2 or not set(top) & set(SPLITS):
        return
    if "train" not in top:
        fix = f"add {os.path.join(data_dir, 'train')} with the training images' class folders"
    elif "test" not in top:
        validation = next(top[n] for n in sorted(top) if n in _VALIDATION_FOLDERS)
        fix = (f"add {os.path.join(data_dir, 'test')}, or pass --data-dir {os.path.join(data_dir, top['train'])} "
               f"(split into train and test here) with --validation-dir {os.path.join(data_dir, validation)}"
               if flag == "--data-dir" else f"pass {flag} a folder of class folders")
    else:
        fix = f"move {', '.join(others)} out of it, or into train/ and test/ as classes"
    raise InputDataError(f"{data_dir} holds the split folders {', '.join(named)}"
                         f"{' beside ' + ', '.join(others) if others else ''}, which would be read as classes; "
                         f"{fix}")


def _check_not_a_split_among_classes(data_dir, name, classes):
    """Raises InputDataError when the folder `name` of `data_dir` (val/, say), beside the class folders `classes`,
    holds folders named as they are: a split of them, which would be trained as one class of them all."""
    folder = storage.join(data_dir, name)
    inside = sorted(set(_class_dirs(folder)) & set(classes))
    if not inside:
        return
    use = (f"move it out of {data_dir} and pass it as --validation-dir" if name.lower() in _VALIDATION_FOLDERS
           else f"lay {data_dir} out as train/<class>/ and test/<class>/, or move {name} out of it")
    raise InputDataError(f"{folder} holds the class folder(s) {', '.join(map(shown_path, inside))}: it is a split "
                         f"of the classes, not a class, and would be trained as one; {use}")


def group_of(path, pattern):
    """Returns the group `path`'s file name belongs to under the regex `pattern`: its first
    capture group, or the whole match; None when it does not match."""
    match = re.search(pattern, os.path.basename(path))
    return None if match is None else (match.group(1) if match.groups() else match.group(0))


def _no_group(path, pattern):
    """Returns why group_of found no group for `path` under `pattern`, the regex shown as it is typed."""
    if re.search(pattern, os.path.basename(path)) is None:
        return f"does not match --group-by='{pattern}'"
    return f"matches --group-by='{pattern}', but its first group took no part in the match (an optional group)"


def split_files(files, labels, test_fraction, seed=0, group_by=None, held_out=("test", "--test-fraction"),
                class_names=None, twins=None):
    """Returns {'train': [(file, label)], 'test': [(file, label)]}, each sorted: about
    `test_fraction` of each class in test, chosen with `seed`. `held_out` names the held-out side
    and its flag in errors (('validation', '--validation-fraction') for a validation split), and
    `class_names` (by label) the classes.

    With the regex `group_by` (see group_of), files of one group are kept on one
    side; groups are drawn in a seeded order and go to test while their largest class
    still needs test images. The files `twins` ({file: the file of `files` it is the same
    image as}) pairs go to train with their groups: no held-out figure counts an image
    twice, or one trained on. Raises InputDataError when a file matches no group, or
    when a class ends with no training or no test image.
    """
    if not group_by and not twins:
        return _stratified_split(files, labels, test_fraction, seed, held_out, class_names)
    groups = collections.defaultdict(list)
    keys = _group_keys(files, group_by, twins or {})
    for f, label in zip(files, labels):
        groups[keys[f]].append((f, label))
    per_class = collections.Counter(labels)
    least = 0 if group_by else 1  # (as _stratified_split: every class tests at least one image)
    wanted = {c: max(least, round(n * test_fraction)) for c, n in per_class.items()}
    order = sorted(groups)
    random.Random(seed).shuffle(order)
    copied = {keys[f] for pair in (twins or {}).items() for f in pair}
    taken, split = collections.Counter(), {"train": [], "test": []}
    for key in order:
        members = groups[key]
        counts = collections.Counter(label for _, label in members)
        main = max(counts, key=lambda c: (counts[c], -c))
        side = "test" if key not in copied and taken[main] + counts[main] <= max(wanted[main], 1) and \
            wanted[main] > 0 else "train"
        if side == "test":
            taken.update(counts)
        split[side] += members
    return _checked(split, per_class, test_fraction, group_by, held_out, class_names, twins)


def _group_keys(files, group_by, twins):
    """Returns {file: its group's key}: its --group-by group (or itself), groups joined by a pair of `twins`
    under the least of their keys. Raises InputDataError for a file in no group."""
    own = {}
    for f in files:
        own[f] = group_of(f, group_by) if group_by else f
        if own[f] is None:
            raise InputDataError(f"{f} {_no_group(f, group_by)}; every file needs a group (the regex's first "
                                 "group, or its whole match, in the file name)")
    joined = {}

    def root(key):
        while joined.get(key, key) != key:
            key = joined[key]
        return key
    for f, twin in sorted(twins.items()):
        a, b = sorted((root(own[f]), root(own[twin])))
        if a != b:
            joined[b] = a
    return {f: root(key) for f, key in own.items()}


def _stratified_split(files, labels, test_fraction, seed, held_out, class_names):
    """Returns split_files's split when every file is a group of its own: exactly round(n x
    test_fraction) of each class's n files in test (at least 1)."""
    by_class = collections.defaultdict(list)
    for f, label in zip(files, labels):
        by_class[label].append(f)
    rng, split = random.Random(seed), {"train": [], "test": []}
    for label in sorted(by_class):
        members = sorted(by_class[label])
        rng.shuffle(members)
        cut = max(1, round(len(members) * test_fraction))
        split["test"] += [(f, label) for f in members[:cut]]
        split["train"] += [(f, label) for f in members[cut:]]
    return _checked(split, collections.Counter(labels), test_fraction, None, held_out, class_names)


def _checked(split, per_class, test_fraction, group_by, held_out, class_names, twins=None):
    name, flag = held_out
    for side in SPLITS:
        split[side].sort()
        present = {label for _, label in split[side]}
        missing = sorted(set(per_class) - present)
        if not missing:
            continue
        label = missing[0]
        named = f"class {class_names[label]!r}" if class_names else f"class index {label}"
        if per_class[label] == 1:  # no fraction helps: one image cannot be on both sides
            where = "" if name == "test" else " left for training"
            verb = "test" if name == "test" else "validate"
            raise InputDataError(f"{named} has 1 image{where}, and a class needs one to train on and one to {verb} "
                                 "on; add images of it, or move its folder out of the data dir")
        label_of = {f: lab for part in SPLITS for f, lab in split[part]}
        copies = sorted(f for f, twin in (twins or {}).items() if label in (label_of.get(f), label_of.get(twin)))
        kept_together = f", {len(copies)} of them links to or copies of another image, which train (e.g. " \
            f"{copies[0]})" if copies else ""
        raise InputDataError(f"the {name if side == 'test' else side} split has no image of {named} "
                             f"({per_class[label]} images) with {flag} {test_fraction}"
                             f"{' and --group-by' if group_by else ''}{kept_together}; give that class more images "
                             f"{'that are not copies ' if copies else ''}(or groups), or change {flag}")
    return split


def read_split_list(path, root):
    """Returns the files listed in the split file `path`, one path relative to `root` per line."""
    return [storage.join(root, *line.split("/")) if storage.is_url(root) else os.path.join(root, line)
            for line in storage.read_text(path).splitlines() if line.strip()]


def split_list_text(files, root):
    """Returns the text of a split file: the paths of `files` relative to `root`, one per line."""
    if storage.is_url(root):
        return "".join(f[len(root.rstrip("/")) + 1:] + "\n" for f in files)
    return "".join(os.path.relpath(f, root) + "\n" for f in files)
