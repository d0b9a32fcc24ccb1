"""Model FLOPs per image read from Keras layers' shapes, against hand counts."""
import pytest
import tensorflow as tf

from models.fashion_cnn import build_fashion_cnn
from models.flops import forward_flops_per_image, model_flops_per_image


def one_layer(layer, input_shape):
    inputs = tf.keras.Input(shape=input_shape)
    return tf.keras.Model(inputs, layer(inputs))


def test_a_conv2d_counts_output_values_times_its_kernel_window():
    # 'valid' 3x3 on 10x10x3 -> 8x8x4: each output value takes 3*3*3 multiply-adds.
    assert forward_flops_per_image(one_layer(tf.keras.layers.Conv2D(4, 3), (10, 10, 3))) == 2 * 8 * 8 * 4 * 27
    # strided 'same' 3x3 on 10x10x8 -> 5x5x6, grouped in 2: 3*3*4 multiply-adds each.
    strided = tf.keras.layers.Conv2D(6, 3, strides=2, padding="same", groups=2)
    assert forward_flops_per_image(one_layer(strided, (10, 10, 8))) == 2 * 5 * 5 * 6 * 36


def test_a_depthwise_conv2d_counts_one_input_channel_per_output_value():
    # 3x3 on 10x10x3 with depth multiplier 2 -> 8x8x6, 9 multiply-adds each.
    layer = tf.keras.layers.DepthwiseConv2D(3, depth_multiplier=2)
    assert forward_flops_per_image(one_layer(layer, (10, 10, 3))) == 2 * 8 * 8 * 6 * 9


def test_a_dense_layer_counts_inputs_times_units_at_every_position():
    assert forward_flops_per_image(one_layer(tf.keras.layers.Dense(5), (7,))) == 2 * 7 * 5
    assert forward_flops_per_image(one_layer(tf.keras.layers.Dense(5), (4, 7))) == 2 * 4 * 7 * 5


def test_layers_without_multiply_adds_count_nothing_and_training_is_three_forwards_but_the_first_input_gradient():
    inputs = tf.keras.Input(shape=(8, 8, 2))
    x = tf.keras.layers.MaxPooling2D()(inputs)
    x = tf.keras.layers.BatchNormalization()(tf.keras.layers.ReLU()(x))
    assert forward_flops_per_image(tf.keras.Model(inputs, x)) == 0
    # The Fashion CNN by hand: 26x26x32x9, 11x11x64x(9x32), 3x3x64x(9x64), 576x64, 64x10 multiply-adds.
    first = 26 * 26 * 32 * 9
    multiply_adds = first + 11 * 11 * 64 * 288 + 3 * 3 * 64 * 576 + 576 * 64 + 64 * 10
    # Backward: every layer's weight gradients, every layer's input gradients but the first's (the image's).
    assert model_flops_per_image(build_fashion_cnn(1e-3)) == {"forward": 2 * multiply_adds,
                                                              "training": 6 * multiply_adds - 2 * first}


def test_frozen_layers_count_only_their_forward_pass_and_the_gradients_that_pass_through_them():
    frozen = tf.keras.layers.Conv2D(4, 3, name="frozen", trainable=False)  # 8x8x4 out, 27 multiply-adds each
    trained = tf.keras.layers.Conv2D(2, 3, name="trained")  # 6x6x2 out, 36 each
    inner = tf.keras.Sequential([tf.keras.Input((6, 6, 2)), tf.keras.layers.Flatten(), tf.keras.layers.Dense(3)])
    inner.trainable = False  # a frozen nested model freezes its layers, whatever theirs say
    inputs = tf.keras.Input((10, 10, 3))
    outputs = tf.keras.layers.Dense(5)(inner(trained(frozen(inputs))))
    model = tf.keras.Model(inputs, outputs)
    f_frozen, f_trained, f_inner, f_head = 2 * 8 * 8 * 4 * 27, 2 * 6 * 6 * 2 * 36, 2 * 72 * 3, 2 * 3 * 5
    assert model_flops_per_image(model) == {
        "forward": f_frozen + f_trained + f_inner + f_head,
        # frozen: forward only; trained: + weight gradients (its input's are not needed); inner, after a
        # trained layer: + input gradients; the head: + both.
        "training": f_frozen + 2 * f_trained + 2 * f_inner + 3 * f_head}


def test_vgg16_without_its_top_at_224_px_is_30_69_gflop_forward():
    vgg16 = tf.keras.applications.VGG16(include_top=False, weights=None, input_shape=(224, 224, 3))
    assert forward_flops_per_image(vgg16) == pytest.approx(30.69e9, rel=0.005)
    nested = tf.keras.Sequential([vgg16, tf.keras.layers.GlobalAveragePooling2D(), tf.keras.layers.Dense(4)])
    assert forward_flops_per_image(nested) == forward_flops_per_image(vgg16) + 2 * 512 * 4


def test_the_oct_jobs_vgg16_counts_gradients_only_for_its_last_block_and_head():
    from models.backbones import build_image_classifier
    model = build_image_classifier("vgg16", 4, (64, 64), 1, weights="none", trainable_layers=4, head="flatten")
    flops = model_flops_per_image(model)
    block5_conv = 2 * 4 * 4 * 512 * 512 * 9  # each of block 5's three convolutions, on 4x4 maps
    head = 2 * 2 * 2 * 512 * 4  # Flatten (2x2x512) -> 4 classes
    # Weight gradients: the three convolutions and the head; input gradients: all of them but the first.
    assert flops["training"] - flops["forward"] == 3 * block5_conv + head + 2 * block5_conv + head
    assert flops["training"] / flops["forward"] == pytest.approx(1.15, abs=0.005)
