"""Fashion-MNIST's facts that its command line (fashion.py) and its job (fashion_job.py) both read:
where Keras keeps the dataset, its training-set size, and the shipped sample's recipe (imports no
TensorFlow)."""
import os

DEFAULT_DATA_DIR = os.path.join(os.path.expanduser("~"), ".keras", "datasets", "fashion-mnist")
TRAIN_EXAMPLES = 60000
# The recipe for the 800 training images of the shipped sample, used when the run falls back to it and
# none of RECIPE_FLAGS is given: the full dataset's (batch 512, rate scaled from 512) runs 8 steps on it
# and learns nothing. Measured over 5 seeds in docs/benchmarks.md ("The first run").
SAMPLE_RECIPE = {"batch_size": 32, "epochs": 20.0, "max_steps": None, "learning_rate": 1e-3, "lr_scaling": "none"}
RECIPE_FLAGS = ("batch_size", "epochs", "max_steps", "learning_rate", "lr_scaling")
