"""A SessionRunHook that collects every evaluated image's scores, label and key (file name)."""
import numpy as np
import tensorflow as tf

# The model_fn adds one dict per replica to this graph collection in EVAL mode:
# {'probabilities': [batch, classes], 'labels': one-hot [batch, classes], and 'keys': [batch] strings
# when the input carries them}.
SCORES_COLLECTION = "evaluation_scores"


def add_scores_to_collection(probabilities, labels, keys=None):
    """Adds one replica's batch tensors to SCORES_COLLECTION, for ScoreCollectorHook."""
    entry = {"probabilities": probabilities, "labels": labels}
    if keys is not None:
        entry["keys"] = keys
    tf.compat.v1.add_to_collection(SCORES_COLLECTION, entry)


class ScoreCollectorHook(tf.estimator.SessionRunHook):
    """Fetches, with each evaluation step, every replica's probabilities, labels and keys.

    They come from the same session run as the metrics' updates, so they belong to
    the batches the metrics counted, each image once. After the evaluation,
    `probabilities` [n, classes], `labels` [n] (class indices) and `keys` [n] (the
    input's file names, or 'image N' in reading order when it has none) hold them.
    """

    def __init__(self):
        self._entries, self._parts = [], []
        self.probabilities = self.labels = self.keys = None

    def begin(self):
        self._entries = tf.compat.v1.get_collection(SCORES_COLLECTION)
        if not self._entries:
            raise RuntimeError("the model_fn added no scores to collect (see hooks.scores.add_scores_to_collection)")
        self._parts = []

    def before_run(self, run_context):
        return tf.estimator.SessionRunArgs(self._entries)

    def after_run(self, run_context, run_values):
        self._parts.extend(run_values.results)  # one dict per replica

    def end(self, session):
        parts = [p for p in self._parts if len(p["probabilities"])]
        if not parts:
            return
        self.probabilities = np.concatenate([p["probabilities"] for p in parts]).astype(np.float64)
        self.labels = np.concatenate([np.argmax(p["labels"], axis=-1) for p in parts])
        if all("keys" in p for p in parts):
            self.keys = [k.decode() if isinstance(k, bytes) else str(k) for p in parts for k in p["keys"]]
        else:
            self.keys = [f"image {i}" for i in range(len(self.labels))]
