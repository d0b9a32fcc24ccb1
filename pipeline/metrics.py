"""Classification figures: from predicted and true class indices, and as evaluation metrics."""
import numpy as np
import tensorflow as tf
from tensorflow.python.ops import metrics_impl  # TF 2.15's v1 metrics: frozen, private helpers

EPSILON = 1e-7  # Keras' clipping of a probability before its logarithm in the cross-entropy
# The evaluation's loss that runs report (validation_loss, eval_loss): the mean over the images of each one's
# cross-entropy. The Estimator's own 'loss' is the mean of each batch's mean loss, whatever the batch's size
# (a partial last batch, a replica's smaller share), and weighted as training is (--class-weight).
CROSS_ENTROPY = "cross_entropy"


def mean_cross_entropy(labels, probabilities):
    """Returns the Estimator eval metric op of CROSS_ENTROPY: the mean over the evaluated images of the
    cross-entropy of softmax `probabilities` against one-hot `labels`, each probability clipped to
    [EPSILON, 1 - EPSILON] as Keras' loss clips it, unweighted."""
    picked = tf.clip_by_value(tf.cast(probabilities, tf.float32), EPSILON, 1 - EPSILON)
    return tf.compat.v1.metrics.mean(-tf.reduce_sum(tf.cast(labels, tf.float32) * tf.math.log(picked), axis=-1))


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
    'precision/NAME' and 'recall/NAME' for each class (0 for a class never predicted or absent), and
    'confusion_matrix', an image of the matrix summed over the evaluation (rows the true class, columns
    the predicted one, in `class_names` order; a cell's brightness is its share of the row, `cell_pixels`
    wide). All are read from one streamed confusion matrix: a v1 precision and recall metric per class
    made two variables and their ops each, a second of graph building per evaluation for 10 classes; the
    matrix is read once, in one merge of the replicas, not once for each figure."""
    true, predicted = tf.argmax(labels, -1), tf.argmax(probabilities, -1)
    # A metric variable (sync-on-read, summed over the replicas when read) and values made in
    # cross-replica context, as tf.compat.v1.metrics.mean_iou does: under a mirrored evaluation
    # a plain variable and a summary made in each replica cannot be read back.
    counts, update = metrics_impl._streaming_confusion_matrix(true, predicted, len(class_names))

    def values(_, counted):  # in cross-replica context: the matrix summed over the replicas, read once
        total = tf.convert_to_tensor(counted)
        diagonal = tf.linalg.diag_part(total)
        shares = {"precision": tf.math.divide_no_nan(diagonal, tf.reduce_sum(total, axis=0)),  # of the predicted
                  "recall": tf.math.divide_no_nan(diagonal, tf.reduce_sum(total, axis=1))}  # of those in the class
        read = {f"{figure}/{name}": tf.cast(share[i], tf.float32)
                for figure, share in shares.items() for i, name in enumerate(class_names)}
        rows = tf.math.divide_no_nan(total, tf.reduce_sum(total, axis=1, keepdims=True))
        pixels = tf.repeat(tf.repeat(rows, cell_pixels, axis=0), cell_pixels, axis=1)
        picture = tf.cast(tf.round(255.0 * pixels), tf.uint8)[None, :, :, None]
        read["confusion_matrix"] = tf.compat.v1.summary.image("confusion_matrix", picture, collections=[])
        return read
    return {name: (value, update)
            for name, value in metrics_impl._aggregate_across_replicas(None, values, counts).items()}
