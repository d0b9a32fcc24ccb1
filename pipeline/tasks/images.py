"""The images job's command line: any folder of class folders (JPEG, PNG, BMP, GIF) on a network
trained from scratch or a tf.keras.applications backbone. Its data and model: images_job.py."""
import argparse
import os
import re

from acquisition import class_folders, storage
from models import BACKBONES, SCRATCH_MODELS
from pipeline.errors import FlagError
from pipeline.flag_types import RecordedStore, int_in_range, open_fraction
from pipeline.tasks import Task, check_data_dir_given

MAX_IMAGE_SIZE = 2048


def regex(text):
    """argparse type: a regular expression that compiles."""
    try:
        re.compile(text)
    except re.error as e:
        raise argparse.ArgumentTypeError(f"not a regular expression ({e}): {text!r}") from None
    return text


def add_flags(parser):
    group = parser.add_argument_group("images")
    group.add_argument("--image-size", type=int_in_range(32, MAX_IMAGE_SIZE), default=224,
                       help="height and width every image is resized to")
    group.add_argument("--channels", type=int, choices=(1, 3), default=None,
                       help="decode the images to 1 (gray) or 3 (RGB) channels; default: 1 when every image is "
                            "grayscale (a GIF counts as colour), else 3 (alpha is dropped; gray feeds 3-channel "
                            "backbones repeated)")
    group.add_argument("--model", choices=BACKBONES, default=BACKBONES[0],
                       help="from random weights: 'small_resnet' (BatchNorm, residual separable-conv blocks, global "
                            "pooling: learns small datasets; with little data add --augment flip,rotate=15,zoom=0.1,"
                            "translate=0.1 and --lr-schedule cosine, see docs/images.md), 'small_cnn' (the "
                            "Fashion-MNIST design at any size) or 'keras_scratch' (Keras's from-scratch example, "
                            "10x wider); or a tf.keras.applications backbone; each with its own preprocessing "
                            "inside the model")
    group.add_argument("--weights", default=None, metavar="imagenet|none|PATH",
                       help="backbone weights: 'imagenet' (Keras's cached file, downloaded once), 'none' "
                            "(random) or a no-top .h5 weights file; default: imagenet for the applications, "
                            "none for the networks trained from scratch")
    group.add_argument("--trainable-layers", type=int_in_range(0, 10 ** 4), default=None,
                       help="layers at the end of the backbone left trainable, the rest frozen; default: all "
                            "with --weights none, 0 (the head only) with pretrained weights")
    group.add_argument("--test-fraction", type=open_fraction, default=0.2, action=RecordedStore,
                       help="with DIR/<class>/<image>: share of each class held out for testing (the split is "
                            "written to <model dir>/split and reused on resume)")
    group.add_argument("--split-seed", type=int_in_range(0, 2 ** 31 - 1), default=0,
                       help="seed of that split")
    group.add_argument("--group-by", type=regex, default=None, metavar="REGEX",
                       help="keep the images whose file names share a group (the regex's first group, or its "
                            "whole match: a patient ID, say) on one side of the split; write a regex that starts "
                            "with '-' as --group-by='-(\\d+)-'")
    group.add_argument("--class-weight", choices=("none", "balanced"), default="none",
                       help="'balanced' weighs each training image's loss by n / (classes x its class's count), "
                            "so that rare classes count as much as common ones")
    group.add_argument("--on-bad-image", choices=("fail", "skip"), default="fail",
                       help="a file with an image extension that cannot be decoded (another format, truncated, "
                            "1-bit BMP, ...): 'fail' names it and stops before training, 'skip' leaves it out "
                            "and lists it in results.json")


def check_flags(settings):
    """Raises FlagError for ImageNet weights of a network trained from scratch, no --data-dir (nor --synthetic),
    a --data-dir on this machine that is no folder, or a --model-dir inside it (see
    check_model_dir_outside_data_dir); InputDataError for such a data dir whose folders cannot be a dataset (see
    class_folders.read_layout: no image is read). A data dir at a URL is read later, by the job."""
    if settings.model in SCRATCH_MODELS and settings.weights == "imagenet":
        raise FlagError(f"--model {settings.model} is trained from scratch and has no ImageNet weights; pass "
                        "--weights none, or a no-top .h5 PATH of its own")
    check_data_dir_given(settings)
    data_dir = settings.data_dir
    if settings.synthetic:
        return
    if not storage.is_url(data_dir) and not os.path.isdir(data_dir):
        raise FlagError(f"--data-dir {data_dir}: no such folder; pass a folder of class folders "
                        "(DIR/<class>/<image>)")
    check_model_dir_outside_data_dir(settings)
    if not storage.is_url(data_dir):
        class_folders.read_layout(data_dir)


def check_model_dir_outside_data_dir(settings):
    """Raises FlagError when --model-dir is --data-dir or lies inside it: every folder of the data dir is read
    as a class (or a train/test split of classes), so the run's own would be one, its PNGs images."""
    if settings.synthetic or not settings.data_dir:
        return
    data_dir, model_dir = settings.data_dir, settings.model_dir
    if storage.is_url(data_dir) != storage.is_url(model_dir):
        return  # one in a bucket, the other on this machine
    if storage.is_url(data_dir):
        data_dir, model_dir = data_dir.rstrip("/"), model_dir.rstrip("/")
        inside = model_dir.startswith(data_dir + "/")
    else:
        data_dir, model_dir = os.path.realpath(data_dir), os.path.realpath(model_dir)
        inside = os.path.commonpath([data_dir, model_dir]) == data_dir != model_dir
    if inside or model_dir == data_dir:
        where = "is inside" if inside else "is"
        raise FlagError(f"--model-dir {settings.model_dir} {where} --data-dir {settings.data_dir}, whose every "
                        "folder is read as a class of images, so the run's own files would be too; pass a "
                        "--model-dir outside it (the default is runs/images under the folder you run from)")


def job():
    """Returns the job module, images_job (imports TensorFlow: called once the flags are known good)."""
    from pipeline.tasks import images_job  # noqa: PLC0415
    return images_job


TASK = Task(
    name="images",
    description="Train an image classifier on a folder of class folders (DIR/<class>/<image>, or "
                "DIR/{train,test}/<class>/<image>) through a Keras-made Estimator, evaluate it on the "
                "test split and export it for predict.py.",
    full_train_examples=None,  # any folder: no published size to derive an epoch's time from
    defaults={"data_dir": None, "batch_size": 32, "epochs": 10.0, "learning_rate": 1e-3,
              "reference_batch_size": 32, "model_dir": os.path.join("runs", "images")},
    add_flags=add_flags,
    job=job,
    check_settings=check_flags,
)
