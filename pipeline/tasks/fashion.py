"""The Fashion-MNIST job: the design's small CNN on 28x28 grayscale clothing images."""
import os

import numpy as np

from input_fns import fashion_mnist, synthetic
from models.fashion_cnn import build_fashion_cnn
from pipeline.tasks import FEATURE_KEY, Task, TaskData

SYNTHETIC_SIZES = {"train": 60000, "test": 10000}  # the real dataset's, so --epochs means the same


def add_flags(parser):
    parser.add_argument("--download-url", default=fashion_mnist.DOWNLOAD_URL,
                        help="base URL (or file:// folder) the IDX files are downloaded from when absent")
    parser.add_argument("--cache-dir", default=None,
                        help="where the TFRecord shards converted from the IDX files go "
                             "(default: <data-dir>/tfrecords)")


def prepare_data(args, batch_size):
    """Returns TaskData over Fashion-MNIST, downloading and converting it first if needed."""
    if args.synthetic:
        def make(training, split):
            return synthetic.make_input_fn(fashion_mnist.IMAGE_SHAPE, fashion_mnist.NUM_CLASSES,
                                           batch_size, training, feature_key=FEATURE_KEY,
                                           num_examples=SYNTHETIC_SIZES[split])
        return TaskData(make(True, "train"), make(False, "test"),
                        SYNTHETIC_SIZES["train"], SYNTHETIC_SIZES["test"], "synthetic",
                        class_names=fashion_mnist.CLASS_NAMES)
    try:
        fashion_mnist.download(args.data_dir, base_url=args.download_url)
    except fashion_mnist.DownloadError as e:
        raise fashion_mnist.DownloadError(
            f"{e}. Put the four files ({', '.join(n for p in fashion_mnist.FILES.values() for n in p)}) "
            f"in a folder and pass it as --data-dir, or run with --synthetic to try the job "
            "without the dataset") from None
    splits = fashion_mnist.prepare_tfrecords(args.data_dir, args.cache_dir)
    return TaskData(
        fashion_mnist.make_input_fn(splits["train"]["pattern"], batch_size, training=True,
                                    feature_key=FEATURE_KEY, seed=args.seed),
        fashion_mnist.make_input_fn(splits["test"]["pattern"], batch_size, training=False,
                                    feature_key=FEATURE_KEY),
        splits["train"]["count"], splits["test"]["count"], "real", class_names=fashion_mnist.CLASS_NAMES,
        train_class_counts=splits["train"]["class_counts"])


def build_model(args, learning_rate):
    """Returns the compiled Fashion-MNIST CNN."""
    return build_fashion_cnn(learning_rate, input_shape=fashion_mnist.IMAGE_SHAPE,
                             num_classes=fashion_mnist.NUM_CLASSES, input_name=FEATURE_KEY)


def split_sample(source_dir, out_dir, num_train, seed=0):
    """Splits the test-file sample in `source_dir` into train and test IDX pairs in `out_dir`.

    The shared real sample holds only t10k files; this makes a data dir the job
    can train on. Returns (train count, test count).
    """
    images, labels = fashion_mnist.load_split(source_dir, "test")
    if not 0 < num_train < len(labels):
        raise ValueError(f"num_train must be between 1 and {len(labels) - 1}, got {num_train}")
    order = np.random.default_rng(seed).permutation(len(labels))
    train, test = order[:num_train], order[num_train:]
    os.makedirs(out_dir, exist_ok=True)
    fashion_mnist.write_split(out_dir, "train", images[train], labels[train])
    fashion_mnist.write_split(out_dir, "test", images[test], labels[test])
    return len(train), len(test)


TASK = Task(
    name="fashion",
    description="Train the design's CNN on Fashion-MNIST through a Keras-made Estimator, "
                "then evaluate it on the test set.",
    full_train_examples=SYNTHETIC_SIZES["train"],
    defaults={"data_dir": fashion_mnist.DEFAULT_DATA_DIR, "batch_size": 512, "epochs": 5.0,
              "learning_rate": 1e-3, "reference_batch_size": 512,
              "model_dir": os.path.join("runs", "fashion")},
    add_flags=add_flags,
    prepare_data=prepare_data,
    build_model=build_model,
)
