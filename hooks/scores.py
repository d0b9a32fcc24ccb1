"""A SessionRunHook that collects every evaluated image's scores, label and key (file name)."""
import numpy as np
import tensorflow as tf

# In EVAL mode the model_fn adds each replica's batch tensors to these graph collections
# (see add_scores_to_collection): probabilities [batch, classes], one-hot labels [batch,
# classes] and, when the input carries them, file names [batch].
PROBABILITIES, LABELS, KEYS = ("evaluation_scores/probabilities", "evaluation_scores/labels",
                               "evaluation_scores/keys")


def add_scores_to_collection(probabilities, labels, keys=None):
    """Adds one replica's batch tensors to the collections ScoreCollectorHook fetches."""
    tf.compat.v1.add_to_collection(PROBABILITIES, probabilities)
    tf.compat.v1.add_to_collection(LABELS, labels)
    if keys is not None:
        tf.compat.v1.add_to_collection(KEYS, keys)


class ScoreCollectorHook(tf.estimator.SessionRunHook):
    """Fetches, with each evaluation step, every replica's probabilities, labels and keys.

    They come from the same session run as the metrics' updates, so they belong to
    the batches the metrics counted. After the evaluation, `probabilities` [n,
    classes], `labels` [n] (class indices) and `keys` [n] (the input's file names, or
    'image N' in reading order when it has none: then `named` is False) hold them; n
    counts what the evaluation scored, so a caller can check that every test image was
    scored once.
    """

    def __init__(self):
        self._fetches, self._parts = {}, []
        self.probabilities = self.labels = self.keys = None
        self.named = False

    def begin(self):
        graph = tf.compat.v1.get_default_graph()
        self._fetches = {name: graph.get_collection(name) for name in (PROBABILITIES, LABELS, KEYS)}
        if not self._fetches[PROBABILITIES]:
            raise RuntimeError("the model_fn added no scores to collect (see hooks.scores.add_scores_to_collection)")
        if self._fetches[KEYS] and len(self._fetches[KEYS]) != len(self._fetches[PROBABILITIES]):
            raise RuntimeError("some replicas' inputs carry file names and others do not")
        self._parts = []

    def before_run(self, run_context):
        return tf.estimator.SessionRunArgs(self._fetches)

    def after_run(self, run_context, run_values):
        self._parts.append(run_values.results)  # each a list over the replicas

    def end(self, session):
        probabilities = [p for part in self._parts for p in part[PROBABILITIES]]
        labels = [l for part in self._parts for l in part[LABELS]]
        self.probabilities = np.concatenate(probabilities).astype(np.float64) if probabilities else np.zeros((0, 0))
        self.labels = np.concatenate([np.argmax(l, axis=-1) for l in labels]) if labels else np.zeros(0, int)
        self.named = bool(self._fetches[KEYS])
        if self.named:
            self.keys = [k.decode() for part in self._parts for batch in part[KEYS] for k in batch]
        else:
            self.keys = [f"image {i}" for i in range(len(self.labels))]
