import numpy as np
import tensorflow as tf

from models.fashion_cnn import build_fashion_cnn


def test_the_design_architecture_and_compilation():
    model = build_fashion_cnn(learning_rate=0.002)
    assert model.input_names == ["image"]
    convs = [l for l in model.layers if isinstance(l, tf.keras.layers.Conv2D)]
    assert [(c.filters, c.kernel_size, c.activation.__name__) for c in convs] == [
        (32, (3, 3), "relu"), (64, (3, 3), "relu"), (64, (3, 3), "relu")]
    pools = [l for l in model.layers if isinstance(l, tf.keras.layers.MaxPooling2D)]
    assert [(p.pool_size, p.strides) for p in pools] == [((2, 2), (2, 2))] * 2
    dense = [l for l in model.layers if isinstance(l, tf.keras.layers.Dense)]
    assert [(d.units, d.activation.__name__) for d in dense] == [(64, "relu"), (10, "softmax")]
    assert isinstance(model.optimizer, tf.keras.optimizers.legacy.Adam)
    assert np.isclose(float(model.optimizer.learning_rate), 0.002)
    assert model.loss == "categorical_crossentropy"
    probabilities = model(np.zeros((2, 28, 28, 1), np.float32)).numpy()
    assert probabilities.shape == (2, 10) and np.allclose(probabilities.sum(axis=1), 1.0, atol=1e-5)
