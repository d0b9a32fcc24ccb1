#!/usr/bin/env python
"""Convert the OCT2017 JPEG tree into TFRecord shards of images already resized,
so that later training runs skip JPEG decoding: train_oct.py --records-dir OUT."""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pipeline  # noqa: E402,F401  (quiets TensorFlow's start-up log)
from input_fns import retinal_oct  # noqa: E402
from pipeline.errors import USER_ERRORS  # noqa: E402
from pipeline.flags import int_in_range  # noqa: E402
from pipeline.tasks.oct import MAX_IMAGE_SIZE, prepare_records  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--data-dir", default=retinal_oct.DEFAULT_DATA_DIR,
                        help="folder holding (or to download) the OCT2017 tree")
    parser.add_argument("--out", required=True, help="folder for the shards and their manifest.json")
    parser.add_argument("--image-size", type=int_in_range(32, MAX_IMAGE_SIZE), default=224,
                        help="height and width of the stored images")
    parser.add_argument("--on-bad-image", choices=("fail", "skip"), default="fail",
                        help="what to do with files that are not whole JPEGs")
    args = parser.parse_args(argv)
    try:
        manifest = prepare_records(args.data_dir, args.out, args.image_size, args.on_bad_image)
    except USER_ERRORS as e:
        parser.exit(1, f"{parser.prog}: error: {e}\n")
    print(f"wrote {manifest['counts']['train']} training and {manifest['counts']['test']} test images "
          f"at {args.image_size}x{args.image_size} to {args.out}"
          + (f"; skipped {len(manifest['skipped_files'])} bad files" if manifest["skipped_files"] else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
