"""predict.py's test-time augmentation (--tta): a Predictor whose answers are the mean of its model's
probabilities over views of each image (input_fns.views), made from the image's pixels.

An image file is decoded and resized here as the export's serving_default decodes it (input_fns.decode,
at full scale), then each view of its uint8 pixels goes through the model's pixels signature (a
SavedModel's, or a .tflite file's only signature). An export without a pixels signature cannot.
"""
import dataclasses

import numpy as np

from input_fns import flip_direction_of
from input_fns.decode import decode_to_pixels
from input_fns.views import apply_view
from serving import ViewsUnavailableError


def mean_over_views(classify_pixels, views, batch):
    """Returns the mean over `views` of `classify_pixels`'s probabilities [n, classes] for each view of the
    uint8 pixels `batch` [n, height, width, channels]."""
    return np.mean([classify_pixels(apply_view(batch, view).numpy())[0] for view in views], axis=0)


def with_views(predictor, views):
    """Returns a copy of the serving.predictor.Predictor `predictor` that answers with the mean of its
    probabilities over `views` (for files and raw pixels alike); raises ViewsUnavailableError (exit 2)
    when its model takes no pixels, or a view is one its job refuses (predictor.forbidden_views)."""
    refused = [view for view in views if view in predictor.forbidden_views]
    if refused:
        named = f"flip={flip_direction_of(refused[0])}" if flip_direction_of(refused[0]) else refused[0]
        raise ViewsUnavailableError(f"--tta {named} is a view the job that trained {predictor.export_dir} refuses: "
                                    f"{predictor.forbidden_views[refused[0]]}; leave it out")
    if predictor.classify_pixels is None:
        raise ViewsUnavailableError(f"--tta makes its views from pixels, and the export at {predictor.export_dir} has "
                                    "no pixels signature (exported before every job's export took them): export the "
                                    "model again")
    classify_pixels, shape, names = predictor.classify_pixels, predictor.pixels_shape, predictor.class_names
    fast = predictor.fast_decode

    def averaged_pixels(batch):
        probabilities = mean_over_views(classify_pixels, views, np.asarray(batch, np.uint8))
        return probabilities, [names[i] for i in probabilities.argmax(axis=-1)]

    def averaged_files(contents):
        return averaged_pixels(decode_to_pixels(contents, shape, fast))

    return dataclasses.replace(predictor, classify=averaged_files, classify_pixels=averaged_pixels)
