"""The Fashion-MNIST job's command line: the design's small CNN on 28x28 grayscale clothing
images. Its data and model: fashion_job.py."""
import os

from pipeline.tasks import Task
from pipeline.tasks.fashion_dataset import DEFAULT_DATA_DIR, TRAIN_EXAMPLES


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
