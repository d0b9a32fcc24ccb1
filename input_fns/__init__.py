"""tf.data input functions for Estimators: they build datasets and nothing else."""

# --augment's transforms, named here so that command lines can offer them without TensorFlow
# (see input_fns.augmentation): each takes a value, a direction for flip and a number for the rest.
AUGMENTATIONS = ("flip", "rotate", "zoom", "translate", "contrast")
FLIP_DIRECTIONS = ("horizontal", "vertical", "both")
