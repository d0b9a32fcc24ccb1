"""The backbones' own preprocessing runs inside the model; weights and trainable layers work for each."""
import numpy as np
import pytest
import tensorflow as tf

from models import BACKBONES, WeightsUnavailableError
from models.backbones import build_image_classifier

# What Keras's own preprocess_input gives, and the layer of each model whose output should match it.
KERAS_PREPROCESSING = {
    "vgg16": (tf.keras.applications.vgg16.preprocess_input, "subtract_imagenet_means"),
    "resnet50": (tf.keras.applications.resnet50.preprocess_input, "subtract_imagenet_means"),
    "mobilenet_v2": (tf.keras.applications.mobilenet_v2.preprocess_input, "scale_to_plus_minus_1"),
    "efficientnet_b0": (tf.keras.applications.efficientnet.preprocess_input, "to_float"),
}


@pytest.mark.parametrize("backbone,channels", [("vgg16", 3), ("resnet50", 1), ("mobilenet_v2", 1),
                                               ("efficientnet_b0", 3)])
def test_uint8_images_get_the_backbones_own_preprocessing(backbone, channels):
    model = build_image_classifier(backbone, 3, (32, 32), channels)
    assert model.input.dtype == tf.uint8 and model.input_shape == (None, 32, 32, channels)
    assert model.output_shape == (None, 3) and model.input_names == ["image"]
    preprocess, layer = KERAS_PREPROCESSING[backbone]
    images = np.random.default_rng(0).integers(0, 256, (2, 32, 32, channels)).astype(np.uint8)
    rgb = np.repeat(images, 3, axis=-1) if channels == 1 else images
    inside = tf.keras.Model(model.input, model.get_layer(layer).output)(images).numpy()
    np.testing.assert_allclose(inside, preprocess(rgb.astype(np.float32)), atol=1e-4)


def test_the_small_cnn_takes_any_size_and_channels():
    model = build_image_classifier("small_cnn", 5, (48, 40), 3)
    assert model.input_shape == (None, 48, 40, 3) and model.output_shape == (None, 5)
    assert "small_cnn" in BACKBONES  # selectable; no longer the default (tests/models/test_scratch.py)


def test_trainable_layers_count_from_the_end_of_the_backbone():
    model = build_image_classifier("small_cnn", 2, (32, 32), 1, trainable_layers=2)
    trainable = [layer.name for layer in model.layers if layer.trainable and layer.weights]
    assert trainable == ["dense", "probabilities"]  # flatten (no weights) and dense are the last 2
    every = build_image_classifier("small_cnn", 2, (32, 32), 1)
    assert all(layer.trainable for layer in every.layers)
    with pytest.raises(ValueError, match="--trainable-layers 9 is more than small_cnn's 8 layers; pass 0 to 8"):
        build_image_classifier("small_cnn", 2, (32, 32), 1, trainable_layers=9)


def test_weights_from_a_file_and_missing_weights(tmp_path):
    first = build_image_classifier("vgg16", 2, (32, 32), 3)
    base = tf.keras.Model(first.input, first.get_layer("block5_pool").output)
    path = str(tmp_path / "base.h5")
    base.save_weights(path)
    again = build_image_classifier("vgg16", 2, (32, 32), 3, weights=path, trainable_layers=0)
    np.testing.assert_array_equal(again.get_layer("block1_conv1").get_weights()[0],
                                  first.get_layer("block1_conv1").get_weights()[0])
    assert [layer.name for layer in again.layers if layer.trainable and layer.weights] == ["probabilities"]
    with pytest.raises(WeightsUnavailableError, match="weights file not found"):
        build_image_classifier("vgg16", 2, (32, 32), 3, weights=str(tmp_path / "absent.h5"))
    with pytest.raises(WeightsUnavailableError, match="small_cnn has no ImageNet weights"):
        build_image_classifier("small_cnn", 2, (32, 32), 3, weights="imagenet")


def test_balanced_class_weights_scale_each_examples_loss():
    model = build_image_classifier("small_cnn", 2, (32, 32), 1, class_weights=[1.0, 3.0])
    y_true = tf.constant([[1.0, 0.0], [0.0, 1.0]])
    y_pred = tf.constant([[0.5, 0.5], [0.5, 0.5]])
    np.testing.assert_allclose(model.loss(y_true, y_pred).numpy(), [np.log(2), 3 * np.log(2)], rtol=1e-5)


def test_the_oct_presets_vgg16_trains_block5_and_a_flatten_head_on_gray_scans(tmp_path):
    model = build_image_classifier("vgg16", 4, (32, 32), 1, weights="none", trainable_layers=4,
                                   learning_rate=1e-4, head="flatten")
    assert [l.name for l in model.layers if l.trainable and l.weights] == [
        "block5_conv1", "block5_conv2", "block5_conv3", "probabilities"]
    assert model.get_layer("flatten") and model.input_shape == (None, 32, 32, 1) and model.output_shape == (None, 4)
    assert isinstance(model.optimizer, tf.keras.optimizers.legacy.Adam)
    frozen = [l.name for l in model.layers if not l.trainable and l.weights and l.name.startswith("block")]
    assert frozen[0] == "block1_conv1" and "block4_conv3" in frozen and len(frozen) == 10
    gray = np.random.default_rng(0).integers(0, 256, (2, 32, 32, 1)).astype(np.uint8)
    inside = tf.keras.Model(model.input, model.get_layer("subtract_imagenet_means").output)(gray).numpy()
    expected = tf.keras.applications.vgg16.preprocess_input(np.repeat(gray, 3, axis=-1).astype(np.float32))
    np.testing.assert_allclose(inside, expected, atol=1e-4)
    (tmp_path / "weights.h5").write_bytes(b"not hdf5 at all")
    with pytest.raises(WeightsUnavailableError, match=r"weights.h5 is not an HDF5 \(\.h5\) weights file"):
        build_image_classifier("vgg16", 4, (32, 32), 1, weights=str(tmp_path / "weights.h5"), head="flatten")
