"""Classification figures computed from predicted and true class indices."""
import numpy as np


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
