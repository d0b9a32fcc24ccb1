"""tf.data input functions for Estimators: they build datasets and nothing else."""

# The feature every input_fn yields its images under. model_to_estimator matches features to the
# Keras model's inputs by name, so the models name their input layer the same (models import it).
FEATURE_KEY = "image"

# --augment's transforms, named here so that command lines can offer them without TensorFlow
# (see input_fns.augmentation): each takes a value, a direction for flip and a number for the rest.
AUGMENTATIONS = ("flip", "rotate", "zoom", "translate", "contrast")
FLIP_DIRECTIONS = ("horizontal", "vertical", "both")
