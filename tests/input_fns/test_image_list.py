"""The input over a list of image files: each pipeline its share, evaluation in list order."""
import numpy as np
import tensorflow as tf

from input_fns.image_list import ImageListConfig, make_input_fn
from tests.acquisition.test_class_folders import write_images


def test_the_image_list_input_shards_between_pipelines_and_keeps_eval_order(tmp_path):
    write_images(str(tmp_path / "a"), 5)
    write_images(str(tmp_path / "b"), 5, ("RGB", "GIF", ".gif"))
    files = sorted(str(p) for p in tmp_path.rglob("*.*"))
    labels = [0] * 5 + [1] * 5
    config = ImageListConfig(files, labels, 2, (16, 16), 3, batch_size=4, training=False)
    parts = [np.concatenate([l.argmax(1) for _, l in make_input_fn(config)(
        tf.distribute.InputContext(2, i, 2)).as_numpy_iterator()]) for i in range(2)]
    assert parts[0].tolist() == labels[0::2] and parts[1].tolist() == labels[1::2]
    whole = list(make_input_fn(config)().as_numpy_iterator())
    assert np.concatenate([l.argmax(1) for _, l in whole]).tolist() == labels
    assert whole[0][0]["image"].dtype == np.uint8 and whole[0][0]["image"].shape == (4, 16, 16, 3)
