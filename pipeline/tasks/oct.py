"""The retinal OCT job's command line: VGG16 transfer learning on the Kermany 2018 OCT
B-scans (4 classes). Its data and model: oct_job.py."""
import os

from models import VGG16_BASE_LAYERS
from pipeline.flag_types import RecordedStore, int_in_range, positive_int
from pipeline.tasks import Task
from pipeline.tasks.oct_dataset import DEFAULT_DATA_DIR, FORBIDDEN_FLIPS, MAX_IMAGE_SIZE, PATIENT_PATTERN, \
    REFERRAL_CLASSES, TRAIN_EXAMPLES


def cache_argument(text):
    """Maps --cache to the input_fn's cache argument: None (off), '' (memory) or a folder."""
    return {"none": None, "memory": ""}.get(text, text)


def add_data_flags(parser):
    """Adds the flags that say how to read the scans (shared with prepare_oct.py); returns their group."""
    group = parser.add_argument_group("OCT")
    group.add_argument("--image-size", type=int_in_range(32, MAX_IMAGE_SIZE), default=224,
                       help="height and width the scans are resized to (VGG16 needs at least 32)")
    group.add_argument("--on-bad-image", choices=("fail", "skip"), default="fail",
                       help="a file that cannot be decoded as a grayscale JPEG (another format, truncated, "
                            "CMYK, 12-bit, lossless): 'fail' names it and stops before any image is used, "
                            "'skip' leaves it out and lists it (in results.json; prepare_oct.py: in the "
                            "shards' manifest.json)")
    return group


def add_flags(parser):
    group = add_data_flags(parser)
    group.add_argument("--weights", default="imagenet",
                       help="VGG16 base weights: 'imagenet' (Keras's cached file, downloaded once), "
                            "'none' (random) or the path of a no-top VGG16 .h5 weights file")
    group.add_argument("--trainable-layers", type=int_in_range(0, VGG16_BASE_LAYERS), default=4,
                       help="layers at the end of the VGG16 base left trainable; the rest are frozen")
    group.add_argument("--decode", choices=("full", "reduced"), default="full",
                       help="'reduced' lets libjpeg decode large scans at 1/2-1/8 scale when that still "
                            "covers --image-size (less aliasing; about the same CPU on these scans)")
    group.add_argument("--cache", type=cache_argument, default=None, metavar="none|memory|DIR",
                       help="keep the decoded, resized training images of the first epoch for later ones: "
                            "in memory, or in files under DIR named by the data, image size and decode mode "
                            "(reused by later runs; an incomplete one is rebuilt)")
    group.add_argument("--records-dir", default=None,
                       help="train on TFRecord shards made by scripts/prepare_oct.py instead of the JPEGs")
    group.add_argument("--shuffle-buffer", type=positive_int, default=2048, action=RecordedStore,
                       help="only with --cache: images shuffled anew each epoch after the cache, which holds "
                            "them in an order shuffled once (without a cache the file names are shuffled "
                            "whole)")



def job():
    """Returns the job module, oct_job (imports TensorFlow: called once the flags are known good)."""
    from pipeline.tasks import oct_job  # noqa: PLC0415
    return oct_job


TASK = Task(
    name="oct",
    description="Fine-tune VGG16 on the retinal OCT scans of Kaggle's kermany2018 (CNV, DME, DRUSEN, "
                "NORMAL) through a Keras-made Estimator, evaluate it on the test folder and export it.",
    full_train_examples=TRAIN_EXAMPLES,
    defaults={"data_dir": DEFAULT_DATA_DIR, "batch_size": 32, "epochs": 1.0, "learning_rate": 1e-4, "reference_batch_size": 64,
              "model_dir": os.path.join("runs", "oct"), "positive_classes": ",".join(REFERRAL_CLASSES)},
    add_flags=add_flags,
    job=job,
    input_variants=("pipeline", "pipeline-reduced", "pipeline-cached", "records", "design", "bare"),
    group_pattern=PATIENT_PATTERN,
    augment_forbidden=FORBIDDEN_FLIPS,
    network="VGG16 with a new head",
)
