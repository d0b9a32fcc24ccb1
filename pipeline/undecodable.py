"""Images TensorFlow could not decode mid-run though their headers read well: found by decoding every image of
the run's folders (acquisition.undecodable), remembered in the model dir (acquisition.undecodable_record),
and, under --on-bad-image skip on one machine, left out by a resume in the same command."""
import logging
import os
import sys

from acquisition import storage, undecodable, undecodable_record
from acquisition.errors import InputDataError
from acquisition.image_checks import shown_path
from acquisition.image_formats import check_image
from acquisition.storage import op_error_line

log = logging.getLogger(__name__)
# In the model dir: the images a run met that TensorFlow could not decode though their headers read well.
RECORD_FILE = "undecodable_images.json"


def left_out(model_dir):
    """Returns {absolute path: problem} of the images a run of `model_dir` could not decode though their headers
    read well, as they were then or gone since (see acquisition.undecodable_record): bad files from now on;
    {} without a model dir."""
    return undecodable_record.remembered(storage.join(model_dir, RECORD_FILE)) if model_dir else {}


def left_out_of_training(left_out_files, training, validation_listed):
    """Returns, sorted, the absolute paths of `left_out_files` (see left_out) among `training` (the paths of the
    images the split gave training, its validation share included) that `validation_listed` (the validation
    list's paths, or None) does not hold out: the images a resume trains on fewer than the model dir's epochs
    were counted on (see training_record.check_same_data)."""
    held = set(map(os.path.abspath, validation_listed or ()))
    return sorted({f for f in map(os.path.abspath, training) if f in left_out_files and f not in held})


def find_and_remember(job, cause):
    """Returns ({file: TensorFlow's words} of the images below `job`'s --data-dir and --validation-dir that it
    cannot decode though their headers read well, the path of the model dir's record they were added to, or
    None where there is no model dir to keep them). `cause` is the failure's line, said while searching."""
    folders = [getattr(job, "data_dir", None), getattr(job, "validation_dir", None)]
    files = undecodable.image_files(folders)
    if not files:
        return {}, None
    print(f"an image could not be decoded ({cause}): decoding the {len(files):,} images of the data dir to name it",
          file=sys.stderr, flush=True)
    # (files whose headers are bad are left out as --on-bad-image skip leaves them)
    found = {f: words for f, words in undecodable.undecodable_images(files).items() if not check_image(f).problem}
    model_dir = getattr(job, "model_dir", None)
    if not found or not model_dir or not storage.isdir(model_dir):
        return found, None
    try:
        return found, undecodable_record.remember(storage.join(model_dir, RECORD_FILE), found)
    except OSError:
        return found, None


def failure_line(found, record, on_bad_image):
    """Returns the one line naming the first of `found` (see find_and_remember) and what to do: what the model
    dir's `record` (None: none kept) now does for the next run under `on_bad_image`."""
    first = min(found)
    more = f" (and {len(found) - 1} more: {', '.join(sorted(found)[1:4])}{', ...' if len(found) > 4 else ''})" \
        if len(found) > 1 else ""
    named = f"{shown_path(first)} cannot be decoded ({found[first]}), though its header reads well{more}"
    if record is None:
        return f"{named}; replace it with a readable copy and run the same command again"
    if on_bad_image == "skip":
        return (f"{named}; the model dir remembers it ({record}): run the same command to resume without it "
                "(--on-bad-image skip), or replace it with a readable copy first")
    return (f"{named}; the model dir remembers it ({record}): replace or remove it, or pass --on-bad-image skip to "
            "leave it out, and run the same command to resume")


def resumed_without_undecodable(attempt, settings):
    """Returns attempt()'s value (a local run's). Under --on-bad-image skip, a run that fails on images TensorFlow
    cannot decode though their headers read well is attempted again once they are remembered, resuming from
    its newest checkpoint without them, for as long as each failure names images not left out already
    (else InputDataError names them). Other failures, and every failure under 'fail', are attempt()'s."""
    if getattr(settings, "on_bad_image", None) != "skip":
        return attempt()
    while True:
        try:
            return attempt()
        except Exception as e:  # noqa: BLE001 - TensorFlow's InvalidArgumentError, told apart by its op
            if not undecodable.is_decode_failure(e):
                raise
            known = set(left_out(settings.model_dir))
            found, record = find_and_remember(settings, op_error_line(e))
            new = sorted(f for f in found if os.path.abspath(f) not in known)
            if not new or record is None:
                raise InputDataError(failure_line(found, record, "skip") if found else
                                     f"an image could not be decoded ({op_error_line(e)}), though its header reads "
                                     "well, and no image of the data dir fails alone; find and replace it") from None
            log.warning("%s cannot be decoded (%s), though its header reads well%s: left out (--on-bad-image skip; "
                        "%s remembers it), resuming from the newest checkpoint without it", shown_path(new[0]),
                        found[new[0]], f" (and {len(new) - 1} more)" if len(new) > 1 else "", record)
