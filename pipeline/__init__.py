"""Wires input_fns, models and hooks into Estimators: strategy, RunConfig, train and evaluate."""
import os

# TensorFlow's C++ start-up chatter (in 2.15 even some harmless "Unable to
# register cuDNN factory" errors) hides the job's own progress; this must be
# set before the first `import tensorflow` to take effect. Real failures still
# surface as Python exceptions.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
