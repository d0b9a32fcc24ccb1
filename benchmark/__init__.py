"""Throughput benchmarks: training sweeps over replicas, batch sizes, data sources and engines,
the input pipelines alone, and their report (tables and plots).

What a sweep can measure is named here, importable without TensorFlow, for the command line.
"""

# estimator: this pipeline; keras: model.fit; custom_loop: a tf.function step over a distributed
# dataset; limit: that step on one batch held in memory. Same model, optimizer, input and batch.
ENGINES = ("estimator", "keras", "custom_loop", "limit")
DATA_SOURCES = ("real", "synthetic")
INPUT_VARIANTS = {
    "fashion": ("pipeline", "design", "synthetic"),
    "oct": ("pipeline", "pipeline-reduced", "pipeline-cached", "records", "design", "bare"),
}
# Any other task's input-only variant: its own training input (task.prepare_data's train_input_fn).
DEFAULT_INPUT_VARIANTS = ("pipeline",)
