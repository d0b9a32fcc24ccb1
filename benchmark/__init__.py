"""Throughput benchmarks: training sweeps over replicas, batch sizes, data sources and engines,
the input pipelines alone, and their report (tables and plots).

What a sweep can measure is named here, importable without TensorFlow, for the command line.
"""

# estimator: this pipeline; keras: model.fit; custom_loop: a tf.function step over a distributed
# dataset; limit: that step on one batch held in memory. Same model, optimizer, input and batch.
ENGINES = ("estimator", "keras", "custom_loop", "limit")
DATA_SOURCES = ("real", "synthetic")
# Each task's input-only variants are its own: pipeline.tasks.Task.input_variants.
# scripts/measure_generalisation.py's arms beside the plain run (benchmark.generalisation.build_arms); the
# default measures the first five, the optimizer's two only when named.
GENERALISATION_ARMS = ("ema", "label_smoothing", "mixup_cutmix", "tta", "temperature", "weight_decay", "sgd")
DEFAULT_GENERALISATION_ARMS = GENERALISATION_ARMS[:5]
ARM_WEIGHT_DECAY, ARM_SGD_RATE = 0.05, 0.05  # the optimizer arms' values unless the measurement names others
