"""Throughput benchmarks: training sweeps over replicas, batch sizes, data sources and engines,
the input pipelines alone, and their report (tables and plots).

What a sweep can measure is named here, importable without TensorFlow, for the command line.
"""

ENGINES = ("estimator", "keras")
DATA_SOURCES = ("real", "synthetic")
INPUT_VARIANTS = {
    "fashion": ("pipeline", "design", "synthetic"),
    "oct": ("pipeline", "pipeline-reduced", "pipeline-cached", "records", "design", "bare"),
}
