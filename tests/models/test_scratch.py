"""The from-scratch networks (models.scratch) build at any size and channels, keep the images job's
input and float32 softmax under mixed precision, normalise with BatchNorm and pool globally."""
import numpy as np
import pytest
import tensorflow as tf

from models import BACKBONES, SCRATCH_MODELS, WeightsUnavailableError
from models.backbones import build_image_classifier
from models.scratch import WIDTHS


@pytest.mark.parametrize("name,size,channels", [("small_resnet", (32, 32), 1), ("small_resnet", (64, 48), 3),
                                                ("keras_scratch", (32, 32), 3)])
def test_the_networks_take_uint8_images_of_any_size_and_end_in_a_float32_softmax(name, size, channels):
    model = build_image_classifier(name, 4, size, channels)
    assert model.input.dtype == tf.uint8 and model.input_names == ["image"]
    assert model.input_shape == (None, *size, channels) and model.output_shape == (None, 4)
    kinds = {type(layer).__name__ for layer in model.layers}
    assert {"BatchNormalization", "GlobalAveragePooling2D", "StepSeededDropout", "SeparableConv2D", "Add"} <= kinds
    stem, blocks, last, _ = WIDTHS[name]
    assert model.get_layer("stem").filters == stem and model.get_layer("dropout").output_shape == (None, last)
    assert [model.get_layer(f"block{i + 1}_sep2").filters for i in range(len(blocks))] == list(blocks)
    images = np.random.default_rng(0).integers(0, 256, (3, *size, channels)).astype(np.uint8)
    probabilities = model(images, training=False).numpy()
    np.testing.assert_allclose(probabilities.sum(axis=1), 1, rtol=1e-5)


def test_under_bf16_the_layers_compute_in_bf16_and_the_softmax_stays_float32():
    tf.keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        model = build_image_classifier("small_resnet", 3, (32, 32), 3)
    finally:
        tf.keras.mixed_precision.set_global_policy("float32")
    assert model.get_layer("stem").compute_dtype == "bfloat16"
    assert model.output.dtype == tf.float32


def test_the_new_network_is_the_default_and_the_old_stays_selectable():
    assert BACKBONES[0] == SCRATCH_MODELS[0] == "small_resnet" and "small_cnn" in BACKBONES


def test_weights_load_from_a_file_and_imagenet_is_refused(tmp_path):
    first = build_image_classifier("small_resnet", 2, (32, 32), 3)
    path = str(tmp_path / "base.h5")
    tf.keras.Model(first.input, first.get_layer("dropout").output).save_weights(path)
    again = build_image_classifier("small_resnet", 2, (32, 32), 3, weights=path)
    for layer in ("stem", "block2_sep1", "block3_2_bn"):
        for a, b in zip(again.get_layer(layer).get_weights(), first.get_layer(layer).get_weights()):
            np.testing.assert_array_equal(a, b)
    with pytest.raises(WeightsUnavailableError, match="small_resnet has no ImageNet weights"):
        build_image_classifier("small_resnet", 2, (32, 32), 3, weights="imagenet")


def test_the_batch_norm_momentum_forgets_the_initial_statistics_within_half_the_run():
    from models.scratch import INITIAL_WEIGHT, MAX_MOMENTUM, MIN_MOMENTUM, moving_statistics_momentum
    for steps in (20, 34, 100, 300):
        momentum = moving_statistics_momentum(steps)
        assert momentum ** (steps / 2) == pytest.approx(INITIAL_WEIGHT)
    assert moving_statistics_momentum(3) == MIN_MOMENTUM and moving_statistics_momentum(10 ** 5) == MAX_MOMENTUM
    model = build_image_classifier("small_resnet", 3, (32, 32), 3, bn_momentum=0.7)
    assert {layer.momentum for layer in model.layers if isinstance(layer, tf.keras.layers.BatchNormalization)} == {0.7}


def test_a_short_run_on_a_small_folder_scores_in_inference_what_it_learned(tmp_path, capsys):
    # 90 images, 34 steps: at a fixed 0.9 the moving variance kept 0.9^34 = 0.03 of its initial 1 against the
    # features' 0.005, and the model scored every image, training images too, as one class (accuracy 1/3).
    import json
    from pipeline.cli import train_main
    from pipeline.tasks.images import TASK
    from tests.images_data import make_shapes_folder
    data = make_shapes_folder(str(tmp_path / "data"), per_class=30)
    model_dir = tmp_path / "model"
    assert train_main(TASK, ["--data-dir", data, "--model-dir", str(model_dir), "--image-size", "48", "--epochs", "15",
                             "--validation-fraction", "0", "--bootstrap-resamples", "20", "--seed", "1"]) == 0, \
        capsys.readouterr().err[-2000:]
    results = json.loads((model_dir / "results.json").read_text())
    assert results["global_step"] == 34 and results["eval_accuracy"] >= 0.8
