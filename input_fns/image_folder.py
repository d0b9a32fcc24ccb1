"""Image-folder datasets (`<split>/<CLASS>/<image>.jpeg`) read by file pattern: the pattern's files,
scanned and checked (acquisition.image_checks), labelled by their parent folder's name in the given
class list, go through the one image input, image_list."""
import dataclasses
from typing import Optional, Sequence, Tuple

from acquisition.image_checks import FolderScan, check_bad_files, scan_folder
from input_fns import FEATURE_KEY, image_list


@dataclasses.dataclass(frozen=True)
class ImageFolderConfig:
    """What an image-folder input reads and how it batches it."""
    file_pattern: str  # the images, one folder per class: <root>/<class>/<pattern>
    class_names: Sequence[str]  # the class folders' names, in label order
    image_size: Tuple[int, int]  # (height, width) every image is resized to
    batch_size: int  # per input pipeline (per replica)
    training: bool  # shuffle, repeat and drop the last partial batch
    scan: Optional[FolderScan] = None  # the folder's scan_folder, when made already (else made here)
    on_bad_image: str = "fail"  # 'fail': stop naming the first bad file; 'skip': leave bad files out
    channels: int = 1  # what each image is decoded to
    fast_decode: bool = False  # let libjpeg decode at 1/2-1/8 scale when that still covers image_size
    cache: Optional[str] = None  # None: no cache; '': in memory; a folder: files named by what they hold
    shuffle_buffer: int = 2048  # with a cache: images shuffled anew each epoch after it
    feature_key: str = FEATURE_KEY
    seed: Optional[int] = None
    skip: int = 0  # training: examples of the stream already trained (see image_list.ImageListConfig)
    file_key: Optional[str] = None  # evaluation: also yield each image's path under this feature


def make_input_fn(config):
    """Returns an Estimator input_fn(input_context=None) over the images matching the config's pattern.

    Batches are ({feature_key: uint8 [batch, h, w, channels]}, one-hot float32 labels).
    Bad files (see jpeg_problem) fail naming the first (on_bad_image='fail') or are left out
    ('skip'). The good files are read in sorted order as image_list.make_input_fn reads a list; a
    folder cache is named by the pattern and the files' sizes and times.
    """
    scan = config.scan or scan_folder(config.file_pattern, config.class_names, config.channels)
    check_bad_files([scan], config.on_bad_image)
    files, labels = scan.good()
    return image_list.make_input_fn(image_list.ImageListConfig(
        files, labels, len(config.class_names), config.image_size, config.channels, config.batch_size,
        config.training, config.feature_key, config.seed, config.fast_decode, config.cache,
        {"pattern": config.file_pattern, "files_fingerprint": scan.fingerprint, "skipped": scan.bad_files},
        config.shuffle_buffer, config.file_key, config.skip))
