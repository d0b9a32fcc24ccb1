"""The validation split, held out of a folder dataset's training files the same way for every job:
--validation-dir's images, or --validation-fraction of each class, seeded and grouped (a patient's
images all on one side)."""
import collections
import hashlib
import logging
import os

from acquisition import class_folders, image_checks, storage
from pipeline.errors import FlagError, UsageError

log = logging.getLogger(__name__)


def held_out_share(files, labels, fraction, seed, group_pattern, class_names=None, twins=None):
    """Returns {'train': (files, labels), 'validation': (files, labels)}: `fraction` of each class of
    (`files`, `labels`) drawn with `seed`, grouped by `group_pattern` (a regular expression whose first
    group names an image's group; None: every image its own), each pair of `twins` (see same_images) in
    training; `class_names` name the classes in errors."""
    sides = class_folders.split_files(files, labels, fraction, seed, group_pattern,
                                      held_out=("validation", "--validation-fraction"), class_names=class_names,
                                      twins=twins)
    return {side: ([f for f, _ in sides[part]], [label for _, label in sides[part]])
            for side, part in (("train", "train"), ("validation", "test"))}


def same_images(files):
    """Returns {file: the first file of `files` it is the same image as} for each file of `files` that is a
    link to or a copy of an earlier one: the same real path, or the same bytes (local files; read whole
    only where two share their size and first 4 KB: 83,484 files whose sizes collide took 9-12 s)."""
    twins, first = {}, {}
    for f in files:
        same = first.setdefault(_real(f), f)
        if same != f:
            twins[f] = same
    for sized in _alike(first.values(), _ContentIndex.size_of):
        for headed in _alike(sized, _head):
            for same in _alike(headed, _ContentIndex.digest_of):
                twins.update({f: same[0] for f in same[1:]})
    return twins


def _alike(files, key):
    """Returns the lists, in `files`' order, of two or more of `files` with one `key` (None: left out)."""
    return [group for group in _grouped(files, key).values() if len(group) > 1]


def _head(path, size=4096):
    """Returns a digest of the first `size` bytes of the local file at `path` (a digest, not the bytes: 83,484
    files of one size would hold 340 MB of heads), or None when it cannot be read."""
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read(size)).digest()
    except OSError:
        return None


def warn_of_twins(twins, grouped, label_of, class_names):
    """Says in one line, when there are any, that `twins` (see same_images) train with the image they are
    (and, when `grouped` by --group-by, with their groups), and names a pair under two classes (`label_of`:
    {file: label}, of `class_names`): one image taught as both."""
    if not twins:
        return
    copy, original = min(twins.items())
    crossed = sorted((f, twin) for f, twin in twins.items() if label_of[f] != label_of[twin])
    across = ""
    if crossed:
        f, twin = crossed[0]
        across = (f"; {len(crossed)} of them in another class folder than the image they are ({image_checks.shown_path(f)} "
                  f"in {class_names[label_of[f]]!r} is {image_checks.shown_path(twin)} in "
                  f"{class_names[label_of[twin]]!r}): the model learns that image as both; keep it in one class folder")
    log.warning("%d image%s a link to or a copy of another (%s is %s): each trains with the image it is%s, so "
                "that no test or validation figure counts an image twice or one the model trained on%s", len(twins),
                " is" if len(twins) == 1 else "s are", image_checks.shown_path(copy),
                image_checks.shown_path(original), ", with its --group-by group" if grouped else "", across)


def split_off_validation(settings, files, labels, read_validation_dir, seed, group_pattern, class_names,
                         test_files=(), twins=None, listed=None):
    """Returns {'train': (files, labels), 'validation': (files, labels)} of the training (`files`,
    `labels`, of `class_names`): `read_validation_dir(folder)`'s (files, labels) with --validation-dir,
    else --validation-fraction of them: those `listed` (a trained model dir's list: see listed_validation), or
    drawn (see held_out_share, `twins` kept in training); None with neither. Raises FlagError when
    --validation-dir holds training or `test_files` images."""
    if settings.validation_dir:
        check_validation_dir_flags(settings)
        validation = read_validation_dir(settings.validation_dir)
        check_kept_apart(settings.validation_dir, validation[0], {"training": files, "test": test_files})
        return {"train": (files, labels), "validation": validation}
    if not settings.validation_fraction:
        return None
    held = _listed_apart(files, labels, listed) if listed is not None else None
    if held is not None:
        return held
    return held_out_share(files, labels, settings.validation_fraction, seed, group_pattern, class_names, twins)


def listed_validation(listed_path):
    """Returns the files the validation list at `listed_path` names, one a line, or None without one (or
    without a path)."""
    if listed_path is None or not storage.isfile(listed_path):
        return None
    return storage.read_text(listed_path).splitlines()


def _listed_apart(files, labels, listed):
    """Returns {'train': ..., 'validation': ...} of (`files`, `labels`): the files `listed` names held out, by
    absolute path, or by class folder and file name where none is at its listed path (an OCT data dir moved, or
    a list of relative paths read from another working directory); None where those names are ambiguous (two
    classes' subfolders of one name hold files of one name), for the caller to draw the split again. Any
    listed file not among `files` is left to check_same_split. A resume takes its split as it was drawn: a
    change of the draw, or an image left out since (see pipeline.undecodable.left_out), moves no other."""
    paths = set(map(_absolute, listed))
    held = [_absolute(f) in paths for f in files]
    if not any(held):
        names = collections.Counter(map(_name, files))
        wanted = collections.Counter(map(_name, listed))
        if any(count > 1 for count in wanted.values()) or any(names[name] > 1 for name in wanted):
            return None
        held = [_name(f) in wanted for f in files]
    sides = {"train": ([], []), "validation": ([], [])}
    for f, label, out in zip(files, labels, held):
        side = sides["validation" if out else "train"]
        side[0].append(f)
        side[1].append(label)
    return sides


def _name(path):
    """Returns the class folder and file name of `path`: how a split list names a file wherever the data dir is."""
    return os.path.join(os.path.basename(os.path.dirname(path)), os.path.basename(path))


def _absolute(path):
    return storage.absolute(path)


def check_same_split(listed_path, files, left_out=()):
    """Raises UsageError when the validation split's `files` are not the ones the model dir's list at
    `listed_path` names, but for those `left_out` (absolute paths of images a run could not decode: see
    pipeline.undecodable.left_out); each by its class folder and file name, however the data dir is
    spelled, and by its size where the listed file is still there (see _check_same_files): its evaluations,
    and the best model chosen among them, would compare two validation sets. Nothing is checked without a
    list (a new run, or one that validated on shards) or without `files`."""
    if files is None or not storage.isfile(listed_path):
        return
    def named(paths):
        return {_name(p): p for p in paths}
    listed = named(p for p in storage.read_text(listed_path).splitlines() if _absolute(p) not in left_out)
    now = named(files)
    if listed.keys() == now.keys():
        _check_same_files(listed, now, listed_path)
        return
    if listed and not now:  # none of them among the training images: they were a --validation-dir's
        folders = {os.path.dirname(os.path.dirname(_absolute(p))) for p in listed.values()}
        where = f"--validation-dir {folders.pop()}" if len(folders) == 1 else "a --validation-dir"
        raise FlagError(f"the {len(listed)} validation images {listed_path} lists are none of this run's training "
                        f"images: its run validated on {where}; resume with it, or pass another --model-dir")
    gone, new = sorted(listed.keys() - now.keys()), sorted(now.keys() - listed.keys())
    example = f"{gone[0]} no longer in it" if gone else f"{new[0]} new in it"
    raise UsageError(f"the validation split is not the one {listed_path} lists ({len(listed)} images then, {len(now)} "
                     f"now: {len(gone)} gone, {len(new)} new; {example}): the run's evaluations and its best model "
                     "would compare two validation sets; restore the data dir's files and pass the validation flags "
                     "it was trained with (--validation-fraction, --validation-dir), or pass another --model-dir")


def _check_same_files(listed, now, listed_path):
    """Raises UsageError when a listed image still at its listed place is not the image of its name now
    read from another (another --validation-dir of the same file names: IMG_0001.jpg, ...): a data dir
    moved leaves nothing at the listed places, and a copy has the same sizes."""
    for name, then in listed.items():
        here = now[name]
        if storage.is_url(then) or storage.is_url(here) or _real(then) == _real(here) or not os.path.isfile(then):
            continue
        if os.path.getsize(then) != os.path.getsize(here):
            raise UsageError(f"the validation split is not the one {listed_path} lists: {here} is not {then} (other "
                             "bytes under the same name), so the run's evaluations and its best model would compare two "
                             "validation sets; pass the validation folder it was trained with (--validation-dir), or "
                             "pass another --model-dir")


def check_validation_dir_flags(settings):
    """Raises FlagError when --validation-dir is not a folder, or comes with a --validation-fraction
    given on the command line, which it would leave unused."""
    folder = settings.validation_dir
    if not storage.isdir(folder):
        raise FlagError(f"--validation-dir {folder} is not a folder; pass a folder of class folders to validate on")
    if "validation_fraction" in getattr(settings, "explicit_flags", ()):
        raise FlagError(f"--validation-dir {folder} and --validation-fraction {settings.validation_fraction:g} both "
                        "choose the validation split; pass one of them")


def check_kept_apart(validation_dir, validation_files, others):
    """Raises FlagError when a file of `validation_files` is also one of `others` ({'training': files,
    ...}), by its real path or, for local files, its bytes (a copy of the test folder): a model chosen
    on images it trained on, or on the test images, is chosen on a score that measures nothing, or the
    test report's."""
    for side, files in others.items():
        shared = shared_images(validation_files, files)
        if shared:
            raise FlagError(f"--validation-dir {validation_dir} holds {len(shared)} of the {side} images "
                            f"({shared[0][0]}, ...); pass a folder of images kept out of training and testing, or "
                            "--validation-fraction to hold some out of the training images")


def check_init_from_validation(init_from, leaked, validation_files, drawn_by):
    """Raises FlagError when the run in `init_from` (--init-from) trained on any of this run's `validation_files`
    (`leaked`, those it trained on): validation, which picks the exported model, stops early and fits
    --calibrate, would score images the starting weights learned. `drawn_by` names the flags of its draw."""
    if leaked:
        raise FlagError(f"--init-from {init_from} trained on {len(leaked)} of this run's {len(validation_files)} "
                        f"validation images ({leaked[0]}, ...): validation would pick the model, stop early and "
                        f"calibrate on images its weights learned; hold out what it held out (its {drawn_by}), "
                        "or pass a --validation-dir of images it never trained on")


def named_as(files, others):
    """Returns the files of `others` named as one of `files` by class folder and file name: the same image in a
    dataset whose names are unique (OCT2017's name the patient and the scan), wherever a copy of it lies, and
    not two scans of the same bytes, which a split by patient may put on both sides."""
    names = set(map(_name, files))
    return [other for other in others if _name(other) in names]


def shared_images(files, others):
    """Returns [(a file of `others`, the file of `files` it is)] for each file of `others` that is one of
    `files`: the same file by its real path (a link), or a local file of the same bytes (a copy)."""
    by_real = {_real(f): f for f in files}
    copies = _ContentIndex(files)
    shared = []
    for other in others:
        same = by_real.get(_real(other)) or copies.find(other)
        if same is not None:
            shared.append((other, same))
    return shared


class _ContentIndex:
    """The local files of a list by their bytes, read only where a file asked about has their size and first
    4 KB: a check against 83,484 training scans reads few of them, even where every file has one size (BMP,
    .gray). Files that cannot be read are left out (their absence is the run's business, not this check's)."""

    def __init__(self, files):
        self._by_size = collections.defaultdict(list)
        for f in files:
            size = self.size_of(f)
            if size is not None:
                self._by_size[size].append(f)
        self._by_head = {}  # size -> {head: [files of the list with that size and head]}
        self._digests = {}  # (size, head) -> {digest: a file of the list with them}

    @staticmethod
    def size_of(path):
        try:
            return None if storage.is_url(path) else os.path.getsize(path)
        except OSError:
            return None

    @staticmethod
    def digest_of(path):
        try:
            with open(path, "rb") as f:
                return hashlib.sha256(f.read()).digest()
        except OSError:
            return None

    def find(self, path):
        """Returns a file of the list with the bytes of the local file at `path`, or None."""
        size = self.size_of(path)
        if size not in self._by_size:
            return None
        if size not in self._by_head:
            self._by_head[size] = _grouped(self._by_size[size], _head)
        key = (size, _head(path))
        if key[1] not in self._by_head[size]:
            return None
        if key not in self._digests:  # (the first file of the list wins, as a set of digests keeps it)
            self._digests[key] = _grouped(self._by_head[size][key[1]], self.digest_of)
        same = self._digests[key].get(self.digest_of(path))
        return same[0] if same else None


def _grouped(files, key):
    """Returns {key(f): [the files of `files` with it, in order]}, files whose key is None left out."""
    groups = collections.defaultdict(list)
    for f in files:
        k = key(f)
        if k is not None:
            groups[k].append(f)
    return dict(groups)


def _real(path):
    return path if storage.is_url(path) else os.path.realpath(path)
