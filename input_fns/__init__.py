"""tf.data input functions for Estimators: they build datasets and nothing else.

The functions they hand to tf.data (Dataset.map, filter) and to tf.map_fn are marked
tf.autograph.experimental.do_not_convert: they branch on Python settings only, and AutoGraph's
conversion (each one's source parsed and rewritten, with the functions it calls) took about 0.1 s a
function every time an input_fn was called: for training, each evaluation and each export.
"""

# The feature every input_fn yields its images under. model_to_estimator matches features to the
# Keras model's inputs by name, so the models name their input layer the same (models import it).
FEATURE_KEY = "image"
# The feature an evaluation input yields each image's file name under (not a model input: the Estimator's
# model_fn takes it out of the features and hands it to the test report's score collector).
FILE_KEY = "file"

# --augment's transforms, named here so that command lines can offer them without TensorFlow
# (see input_fns.augmentation): each takes a value, a direction for flip and a number for the rest.
AUGMENTATIONS = ("flip", "rotate", "zoom", "translate", "contrast")
FLIP_DIRECTIONS = ("horizontal", "vertical", "both")

# The views of test-time augmentation (--tta; input_fns.views makes them), named here for the same reason.
IDENTITY = "identity"  # the image as it is: always the first view
FLIP_VIEWS = {"horizontal": "flip", "vertical": "flip_vertical", "both": "flip_both"}  # a view's name by direction
# The corner and centre crops of --tta crops, each resized back to the model's input size.
CROP_VIEWS = ("crop_top_left", "crop_top_right", "crop_bottom_left", "crop_bottom_right", "crop_centre")
CROP_FRACTION = 0.875  # a crop's side, as a fraction of the image's


def flip_direction_of(view):
    """Returns the direction of the flip view `view` ('vertical' for 'flip_vertical'), or None for another view."""
    return next((direction for direction, name in FLIP_VIEWS.items() if name == view), None)


def flip_views(forbidden):
    """Returns {view name: why} of the flips `forbidden` ({'flip' or 'flip=DIRECTION': why}, --augment's
    words) names: a job's refused flips, as the --tta views they are."""
    views = {}
    for name, why in forbidden.items():
        flip, _, direction = name.partition("=")
        if flip == "flip":
            views.update({FLIP_VIEWS[d]: why for d in ([direction] if direction else FLIP_DIRECTIONS)})
    return views
