"""serving.export: an export interrupted midway leaves no temporary folder behind."""
import os

import pytest
import tensorflow as tf

from input_fns.decode import make_serving_input_fn
from models.fashion_cnn import build_fashion_cnn
from serving.export import export_model


def test_an_export_interrupted_midway_leaves_no_temporary_folder(tmp_path):
    model = build_fashion_cnn(1e-3, input_shape=(28, 28, 1), num_classes=2, input_dtype="uint8")
    estimator = tf.keras.estimator.model_to_estimator(keras_model=model, model_dir=str(tmp_path / "m"))
    serving = make_serving_input_fn((28, 28), 1)
    export_base = str(tmp_path / "m" / "export")
    earlier = os.path.join(export_base, "temp-1")  # another export's: not this one's to remove
    os.makedirs(earlier)

    def interrupted(*args, **kwargs):  # the stop signal comes while the export builds its graph
        serving(*args, **kwargs)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        export_model(estimator, interrupted, ["a", "b"], export_base)
    assert os.listdir(export_base) == ["temp-1"]
    path = export_model(estimator, serving, ["a", "b"], export_base)
    assert sorted(os.listdir(export_base)) == sorted(["temp-1", os.path.basename(path)])
