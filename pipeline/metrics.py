"""Classification figures: from predicted and true class indices, and as evaluation metrics."""
import numpy as np
import tensorflow as tf
from tensorflow.python.ops import metrics_impl  # TF 2.15's v1 metrics: frozen, private helpers


def classification_report(true_labels, predicted_labels, class_names):
    """Returns {'confusion_matrix': rows = true class, columns = predicted class,
    'per_class': {name: {'precision', 'recall', 'support'}}}.

    Precision of a class never predicted, or recall of a class absent, is None.
    """
    n = len(class_names)
    matrix = np.zeros((n, n), dtype=np.int64)
    np.add.at(matrix, (np.asarray(true_labels), np.asarray(predicted_labels)), 1)
    per_class = {}
    for i, name in enumerate(class_names):
        predicted, actual = matrix[:, i].sum(), matrix[i, :].sum()
        per_class[name] = {
            "precision": float(matrix[i, i] / predicted) if predicted else None,
            "recall": float(matrix[i, i] / actual) if actual else None,
            "support": int(actual),
        }
    return {"confusion_matrix": matrix.tolist(), "per_class": per_class}


def per_class_metric_ops(labels, probabilities, class_names, cell_pixels=16):
    """Returns Estimator eval_metric_ops over one-hot `labels` and softmax `probabilities`:
    'precision/NAME' and 'recall/NAME' for each class, and 'confusion_matrix', an image of the
    matrix summed over the evaluation (rows the true class, columns the predicted one, in
    `class_names` order; a cell's brightness is its share of the row, `cell_pixels` wide)."""
    true, predicted = tf.argmax(labels, -1), tf.argmax(probabilities, -1)
    ops = {}
    for i, name in enumerate(class_names):
        is_true, is_predicted = tf.equal(true, i), tf.equal(predicted, i)
        ops[f"precision/{name}"] = tf.compat.v1.metrics.precision(is_true, is_predicted)
        ops[f"recall/{name}"] = tf.compat.v1.metrics.recall(is_true, is_predicted)
    n = len(class_names)
    # A metric variable (sync-on-read, summed over the replicas when read) and a value made in
    # cross-replica context, as tf.compat.v1.metrics.mean_iou does: under a mirrored evaluation
    # a plain variable and a summary made in each replica cannot be read back.
    counts, update = metrics_impl._streaming_confusion_matrix(true, predicted, n)

    def image(_, total):
        shares = tf.math.divide_no_nan(total, tf.reduce_sum(total, axis=1, keepdims=True))
        pixels = tf.repeat(tf.repeat(shares, cell_pixels, axis=0), cell_pixels, axis=1)
        picture = tf.cast(tf.round(255.0 * pixels), tf.uint8)[None, :, :, None]
        return tf.compat.v1.summary.image("confusion_matrix", picture, collections=[])
    ops["confusion_matrix"] = (metrics_impl._aggregate_across_replicas(None, image, counts), update)
    return ops
