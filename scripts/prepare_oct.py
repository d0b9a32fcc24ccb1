#!/usr/bin/env python
"""Convert the OCT2017 JPEG tree into TFRecord shards of images already resized,
so that later training runs skip JPEG decoding: train_oct.py --records-dir OUT."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pipeline.cli import run_command  # noqa: E402
from pipeline.flags import add_data_dir_flag  # noqa: E402
from pipeline.flag_types import ArgumentParser, HelpFormatter  # noqa: E402
from pipeline.tasks import oct as oct_task  # noqa: E402


def build_parser():
    """Returns the parser: train_oct.py's data flags, and --out."""
    parser = ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    add_data_dir_flag(parser, oct_task.DEFAULT_DATA_DIR)
    parser.add_argument("--out", required=True, help="folder for the shards and their manifest.json")
    oct_task.add_data_flags(parser)
    return parser


def prepare(args):
    from pipeline.tasks.oct_job import prepare_records  # imports TensorFlow: only once the arguments are good
    manifest, reused = prepare_records(args.data_dir, args.out, args.image_size, args.on_bad_image)
    counts = {split: entry["count"] for split, entry in manifest["splits"].items()}
    print(f"{'reused the shards of' if reused else 'wrote'} {counts['train']} training and {counts['test']} test "
          f"images at {args.image_size}x{args.image_size} {'in' if reused else 'to'} {args.out}"
          + (" (made from the same files and flags)" if reused else "")
          + (f"; skipped {len(manifest['skipped_files'])} bad files" if manifest["skipped_files"] else ""))


if __name__ == "__main__":
    sys.exit(run_command(build_parser(), prepare))
