"""Exports that serve temperature-scaled probabilities (reporting/calibration.py): the model's
softmax(z) becomes softmax(z / T), one temperature T fitted on the validation split.

Where the served probabilities come from a softmax, T divides its logits z, so that Grad-CAM
(serving/gradcam.py), which differentiates the softmax's input, explains the same logits (its
heatmaps, scaled to their maximum, do not change). That equals calibration.apply_temperature's
softmax(ln p / T) of the probabilities p = softmax(z), but for a p below calibration.EPSILON
(where a float32 softmax underflows), which it counts as EPSILON.
"""
import json

import tensorflow as tf

from reporting.calibration import EPSILON
from serving.export import PROBABILITIES, export_model, softmax_logits, with_class_names

CALIBRATION_FILE = "calibration.json"  # in the export's assets.extra: {"method", "temperature"}


def scaled(probabilities, temperature):
    """Returns float32 softmax(z / `temperature`) of the logits z behind `probabilities`, or, when they
    come from no softmax, softmax(ln max(p, EPSILON) / `temperature`)."""
    logits = softmax_logits(probabilities)
    if logits is None:
        logits = tf.math.log(tf.maximum(tf.cast(probabilities, tf.float32), EPSILON))
    return tf.nn.softmax(tf.cast(logits, tf.float32) / temperature, name="calibrated_probabilities")


def temperature_model_fn(model_fn, temperature, class_names):
    """Returns `model_fn` (an Estimator's public model_fn) with its PREDICT predictions and serving
    signature giving the probabilities scaled by `temperature` (the predicted class is unchanged)."""
    def calibrated_model_fn(features, labels, mode, config):
        spec = model_fn(features, labels, mode, config)
        if mode != tf.estimator.ModeKeys.PREDICT:
            return spec
        probabilities = spec.predictions.get(PROBABILITIES, next(iter(spec.predictions.values())))
        return with_class_names(spec, scaled(probabilities, temperature), class_names)
    return calibrated_model_fn


def export_with_temperature(estimator, serving_input_fn, class_names, export_base, temperature,
                            checkpoint_path=None):
    """Exports `checkpoint_path` (default: the latest) of `estimator`'s model serving probabilities
    scaled by `temperature`, with CALIBRATION_FILE in assets.extra (see serving.export.export_model);
    returns the export's path."""
    calibrated = tf.estimator.Estimator(temperature_model_fn(estimator.model_fn, temperature, class_names),
                                        config=estimator.config)
    record = json.dumps({"method": "temperature", "temperature": temperature}) + "\n"
    return export_model(calibrated, serving_input_fn, class_names, export_base, checkpoint_path,
                        extra_assets={CALIBRATION_FILE: record})
