"""Exports that serve: a SavedModel whose signature returns, for each image, the class
probabilities and the predicted class name, so a TF Serving or saved_model_cli client
needs nothing else."""
import logging
import os
import tempfile

import tensorflow as tf

log = logging.getLogger(__name__)

PROBABILITIES = "probabilities"
CLASS_NAME = "class_name"
CLASS_NAMES_FILE = "class_names.txt"  # in the export's assets.extra, for readers of the folder


def with_class_names(spec, probabilities, class_names):
    """Returns the PREDICT EstimatorSpec `spec` of a softmax model whose output is `probabilities`,
    answering with PROBABILITIES and CLASS_NAME, the name of the most probable class, in its
    predictions and in its serving signature."""
    names = tf.gather(tf.constant(list(class_names)), tf.argmax(probabilities, axis=-1))
    predictions = {PROBABILITIES: probabilities, CLASS_NAME: names}
    return spec._replace(predictions=predictions, export_outputs={
        tf.saved_model.DEFAULT_SERVING_SIGNATURE_DEF_KEY: tf.estimator.export.PredictOutput(predictions)})


def export_model(estimator, serving_input_fn, class_names, export_base, checkpoint_path=None):
    """Exports the checkpoint `checkpoint_path` (default: the estimator's latest) under `export_base`
    (in a temporary folder, renamed when whole) with the class names in assets.extra; returns the
    export's path."""
    with tempfile.TemporaryDirectory() as tmp:
        names = os.path.join(tmp, CLASS_NAMES_FILE)
        with open(names, "w") as f:
            f.write("\n".join(class_names) + "\n")
        path = estimator.export_saved_model(export_base, serving_input_fn,
                                            assets_extra={CLASS_NAMES_FILE: names},
                                            checkpoint_path=checkpoint_path)
    path = path.decode() if isinstance(path, bytes) else path
    log.info("exported the model to %s", path)
    return os.path.abspath(path)
