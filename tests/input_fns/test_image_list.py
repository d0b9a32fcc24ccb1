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


def test_a_training_cache_is_one_a_seed_as_it_holds_the_files_in_that_seed_s_order(tmp_path):
    """A --deterministic run of seed 2 read the cache seed 1 had filled, and trained in seed 1's order."""
    import dataclasses
    import glob
    import os
    from tensorflow.python.framework import config as tf_config
    write_images(str(tmp_path / "a"), 6)
    write_images(str(tmp_path / "b"), 6, ("RGB", "GIF", ".gif"))
    files = sorted(str(p) for p in (tmp_path / "a").iterdir()) + sorted(str(p) for p in (tmp_path / "b").iterdir())
    config = ImageListConfig(files, [0] * 6 + [1] * 6, 2, (16, 16), 3, batch_size=4, training=True,
                             cache_key={"files": "these"}, shuffle_buffer=12)

    def labels(seed, cache):  # 5 batches of 4: past the first epoch of 12, which completes the cache
        batches = make_input_fn(dataclasses.replace(config, seed=seed, cache=str(tmp_path / cache)))().take(5)
        return np.concatenate([l.argmax(1) for _, l in batches.as_numpy_iterator()]).tolist()
    tf.config.experimental.enable_op_determinism()
    try:
        labels(1, "shared")
        after_seed_1, alone = labels(2, "shared"), labels(2, "own")
    finally:
        tf_config.disable_op_determinism()
    assert after_seed_1 == alone
    assert len(glob.glob(os.path.join(tmp_path, "shared", "images-*.index"))) == 2  # a cache a seed
