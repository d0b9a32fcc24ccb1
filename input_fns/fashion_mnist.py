"""The input_fns over Fashion-MNIST's shards (made by acquisition.fashion_mnist.prepare_shards):
batches of ({feature_key: float32 [28, 28, 1] in [0, 1]}, one-hot float32 [10])."""
from acquisition.fashion_mnist import IMAGE_SHAPE, NUM_CLASSES
from input_fns import FEATURE_KEY, records


def make_input_fn(file_pattern, batch_size, training, feature_key=FEATURE_KEY, seed=None, skip=0):
    """Returns an Estimator input_fn over Fashion-MNIST shards matching `file_pattern`.

    The records (about 50 MB for the whole training set) are kept in memory
    after the first epoch; see records.make_record_input_fn for the order and `skip`.
    """
    return records.make_image_records_input_fn(file_pattern, IMAGE_SHAPE, NUM_CLASSES, batch_size, training,
                                               feature_key, seed=seed, scale=True, cache_in_memory=True,
                                               skip=skip)
