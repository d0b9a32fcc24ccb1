"""The Fashion-MNIST job's command line: the design's small CNN on 28x28 grayscale clothing
images. Its data and model: fashion_job.py."""
import os

from pipeline.tasks import Task

DEFAULT_DATA_DIR = os.path.join(os.path.expanduser("~"), ".keras", "datasets", "fashion-mnist")
TRAIN_EXAMPLES = 60000
# The recipe for the 800 training images of the shipped sample, used when the run falls back to it and
# none of RECIPE_FLAGS is given: the full dataset's (batch 512, rate scaled from 512) runs 8 steps on it
# and learns nothing. Measured over 5 seeds in docs/benchmarks.md ("The first run").
SAMPLE_RECIPE = {"batch_size": 32, "epochs": 20.0, "max_steps": None, "learning_rate": 1e-3, "lr_scaling": "none"}
RECIPE_FLAGS = ("batch_size", "epochs", "max_steps", "learning_rate", "lr_scaling")


def add_flags(parser):
    group = parser.add_argument_group("Fashion-MNIST")
    group.add_argument("--download-url", default=None,
                       help="base URL (or file:// folder) the IDX files are downloaded from when absent "
                            "(default: the tf-keras-datasets bucket Keras itself uses)")
    group.add_argument("--cache-dir", default=None,
                       help="where the TFRecord shards converted from the IDX files go (default: "
                            "<data-dir>/tfrecords)")
    group.add_argument("--no-sample-fallback", action="store_true",
                       help="when the default --data-dir has no dataset and the download fails, stop with an "
                            "error instead of training on the 1,000-image sample shipped with the project (with "
                            "its own recipe, batch 32, 20 epochs, rate 1e-3 not scaled, unless --batch-size, "
                            "--epochs, --max-steps, --learning-rate or --lr-scaling is given)")



def job():
    """Returns the job module, fashion_job (imports TensorFlow: called once the flags are known good)."""
    from pipeline.tasks import fashion_job  # noqa: PLC0415
    return fashion_job


TASK = Task(
    name="fashion",
    description="Train the design's CNN on Fashion-MNIST through a Keras-made Estimator, "
                "then evaluate it on the test set.",
    full_train_examples=TRAIN_EXAMPLES,
    defaults={"data_dir": DEFAULT_DATA_DIR, "batch_size": 512, "epochs": 5.0,
              "learning_rate": 1e-3, "reference_batch_size": 512,
              "model_dir": os.path.join("runs", "fashion")},
    add_flags=add_flags,
    job=job,
    input_variants=("pipeline", "design", "synthetic"),
)
