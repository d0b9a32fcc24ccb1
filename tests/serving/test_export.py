"""serving.export: an export interrupted midway leaves no temporary folder behind; an export of a checkpoint
exported before is the one already there."""
import logging
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from input_fns.decode import make_serving_input_fn
from models.fashion_cnn import build_fashion_cnn
from serving.export import SOURCE_FILE, export_model
from serving.predict import classify_files, load_predictor, resolve_export_dir
from tests.images_data import draw_shape, encode


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


def train_steps(estimator, steps):
    """Trains `estimator` `steps` more steps on random 28x28 images of 2 classes."""
    def input_fn():
        images = tf.random.uniform((8, 28, 28, 1), 0, 255, tf.int32, seed=1)
        labels = tf.one_hot(tf.range(8) % 2, 2)
        return tf.data.Dataset.from_tensors((tf.cast(images, tf.uint8), labels)).repeat()
    estimator.train(input_fn, steps=steps)


def test_an_export_of_a_checkpoint_exported_before_with_the_same_assets_is_the_one_kept(tmp_path, caplog):
    """A run stopped after its export, before results.json named it, exports the same checkpoint again when
    relaunched: it keeps the export there when it is the newest. Another checkpoint, other assets, another
    checkpoint of the same name, an export cut short or one newer than the match get a new one."""
    model = build_fashion_cnn(1e-3, input_shape=(28, 28, 1), num_classes=2, input_dtype="uint8")
    model_dir = tmp_path / "m"
    estimator = tf.keras.estimator.model_to_estimator(keras_model=model, model_dir=str(model_dir))
    serving, export_base = make_serving_input_fn((28, 28), 1), str(model_dir / "export")
    train_steps(estimator, 1)
    first = export_model(estimator, serving, ["a", "b"], export_base)
    assert open(os.path.join(first, "assets.extra", SOURCE_FILE)).read().startswith("model.ckpt-1 ")
    with caplog.at_level(logging.INFO, logger="serving.export"):
        assert export_model(estimator, serving, ["a", "b"], export_base) == first
    assert f"kept the export of model.ckpt-1 already at {first}" in caplog.text
    assert export_model(estimator, serving, ["a", "b"], export_base, estimator.latest_checkpoint()) == first

    calibrated = export_model(estimator, serving, ["a", "b"], export_base, extra_assets={"calibration.json": "{}\n"})
    # first's assets again, but it is no longer the newest, which predict.py serves: results.json named first
    plain = export_model(estimator, serving, ["a", "b"], export_base)
    assert plain not in (first, calibrated) and resolve_export_dir(str(model_dir)) == plain
    renamed = export_model(estimator, serving, ["a", "c"], export_base)
    assert len({first, calibrated, plain, renamed}) == 4

    # model.ckpt-1 again, trained anew (a damaged checkpoint's steps trained again): other weights
    shutil.rmtree(model_dir / "keras")
    for name in os.listdir(model_dir):
        if name.startswith(("model.ckpt", "checkpoint", "graph", "events")):
            os.remove(model_dir / name)
    estimator = tf.keras.estimator.model_to_estimator(keras_model=build_fashion_cnn(
        1e-3, input_shape=(28, 28, 1), num_classes=2, input_dtype="uint8"), model_dir=str(model_dir))
    train_steps(estimator, 1)
    retrained = export_model(estimator, serving, ["a", "b"], export_base)
    assert retrained not in (first, calibrated, renamed)

    os.remove(os.path.join(retrained, "saved_model.pb"))  # cut short (a copy to a URL stopped midway)
    again = export_model(estimator, serving, ["a", "b"], export_base)
    assert again != retrained and os.path.exists(os.path.join(again, "saved_model.pb"))


def test_class_names_with_spaces_at_their_ends_come_back_from_an_export_as_the_model_names_them(tmp_path):
    """Class folders ' DME' and 'CNV ': predict.py's probabilities were keyed 'DME' and 'CNV' (stripped) while the
    class the export answered was ' DME'."""
    names = [" DME", "CNV "]
    model = build_fashion_cnn(1e-3, input_shape=(28, 28, 1), num_classes=2, input_dtype="uint8")
    estimator = tf.keras.estimator.model_to_estimator(keras_model=model, model_dir=str(tmp_path / "m"))
    train_steps(estimator, 1)
    export_model(estimator, make_serving_input_fn((28, 28), 1), names, str(tmp_path / "m" / "export"))
    image = tmp_path / "x.png"
    image.write_bytes(encode(draw_shape("circle", 28, np.random.default_rng(0)), "L", "PNG"))
    predictor = load_predictor(str(tmp_path / "m"))
    (answer,) = classify_files(predictor, [str(image)])
    assert predictor.class_names == names
    assert list(answer["probabilities"]) == names and answer["class"] in names
