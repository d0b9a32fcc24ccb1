import os

import numpy as np
import pytest
import tensorflow as tf

from models import vgg16_transfer
from models import WeightsUnavailableError
from models.vgg16_transfer import build_vgg16_classifier


def trainable_layers(model):
    return [l.name for l in model.layers if l.trainable and l.weights]


def test_only_the_last_layers_of_the_vgg16_base_and_the_head_train():
    model = build_vgg16_classifier(4, (32, 32), weights="none")
    assert trainable_layers(model) == ["block5_conv1", "block5_conv2", "block5_conv3", "probabilities"]
    assert model.input_names == ["image"] and model.output_shape == (None, 4)
    assert isinstance(model.optimizer, tf.keras.optimizers.legacy.Adam)
    frozen = [l.name for l in model.layers if not l.trainable and l.weights and l.name.startswith("block")]
    assert frozen[0] == "block1_conv1" and "block4_conv3" in frozen and len(frozen) == 10


@pytest.mark.parametrize("channels", [1, 3])
def test_uint8_images_get_kerass_vgg16_preprocessing_inside_the_model(channels):
    model = build_vgg16_classifier(4, (32, 32), weights="none", input_channels=channels)
    assert model.input.dtype == tf.uint8 and model.input_shape == (None, 32, 32, channels)
    preprocess = tf.keras.Model(model.input, model.get_layer("subtract_imagenet_means").output)
    images = np.random.default_rng(0).integers(0, 256, (2, 32, 32, channels)).astype(np.uint8)
    rgb = np.repeat(images, 3, axis=-1) if channels == 1 else images
    expected = tf.keras.applications.vgg16.preprocess_input(rgb.astype(np.float32))
    np.testing.assert_allclose(preprocess(images).numpy(), expected, atol=1e-4)


def test_the_number_of_trainable_base_layers_is_a_parameter():
    assert trainable_layers(build_vgg16_classifier(4, (32, 32), weights="none", trainable_layers=0)) == [
        "probabilities"]
    assert trainable_layers(build_vgg16_classifier(4, (32, 32), weights="none", trainable_layers=8))[:2] == [
        "block4_conv1", "block4_conv2"]


def test_missing_weights_are_a_clear_error(tmp_path, monkeypatch):
    with pytest.raises(WeightsUnavailableError, match="weights file not found"):
        build_vgg16_classifier(4, (32, 32), weights=str(tmp_path / "absent.h5"))
    monkeypatch.setenv("HOME", str(tmp_path))  # no cached ImageNet weights

    def offline(*args, **kwargs):
        raise Exception("URL fetch failure on https://storage.googleapis.com/...: None -- [Errno -2] Name or "
                        "service not known")
    monkeypatch.setattr(vgg16_transfer.tf.keras.utils, "get_file", offline)
    with pytest.raises(WeightsUnavailableError, match=r"URL fetch failure.*--weights PATH.*--weights none"):
        build_vgg16_classifier(4, (32, 32), weights="imagenet")
    assert not os.path.exists(tmp_path / ".keras")
