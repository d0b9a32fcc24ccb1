"""The validation split, held out of a folder dataset's training files the same way for every job:
--validation-dir's images, or --validation-fraction of each class, seeded and grouped (a patient's
images all on one side)."""
from acquisition import class_folders


def held_out_share(files, labels, fraction, seed, group_pattern):
    """Returns {'train': (files, labels), 'validation': (files, labels)}: `fraction` of each class of
    (`files`, `labels`) drawn with `seed`, grouped by `group_pattern` (a regular expression whose first
    group names an image's group; None: every image its own)."""
    sides = class_folders.split_files(files, labels, fraction, seed, group_pattern,
                                      held_out=("validation", "--validation-fraction"))
    return {side: ([f for f, _ in sides[part]], [label for _, label in sides[part]])
            for side, part in (("train", "train"), ("validation", "test"))}


def split_off_validation(settings, files, labels, read_validation_dir, seed, group_pattern):
    """Returns {'train': (files, labels), 'validation': (files, labels)} of the training (`files`,
    `labels`): `read_validation_dir(folder)`'s (files, labels) with --validation-dir, else
    --validation-fraction of them (see held_out_share); None with neither."""
    if settings.validation_dir:
        return {"train": (files, labels), "validation": read_validation_dir(settings.validation_dir)}
    if not settings.validation_fraction:
        return None
    return held_out_share(files, labels, settings.validation_fraction, seed, group_pattern)
