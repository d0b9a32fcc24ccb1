"""oneDNN's convolution weight gradient (Conv2DBackpropFilter) against the same gradient as one
matmul of the input's shifted windows (kh x kw slices of the padded input, concatenated) with the
output's gradient, for every weight-gradient shape the Fashion CNN and VGG16 (64 and 224 px, block 5
trained) compute, in fp32 and bf16. Prints one line per shape and way: median ms of 5 x 3 calls,
GFLOP/s, and the largest difference from oneDNN's result relative to its largest value.

    python docs/benchmarks/weight-gradient-lever-cpu/measure.py
"""
import time

import numpy as np
import tensorflow as tf

# (batch, input height = width, input channels, output channels, padding): a layer's weight gradient
SHAPES = [(512, 28, 1, 32, "VALID"), (512, 13, 32, 64, "VALID"), (512, 5, 64, 64, "VALID"),  # Fashion CNN
          (64, 4, 512, 512, "SAME"),  # VGG16 64 px, block 5
          (32, 14, 512, 512, "SAME")]  # VGG16 224 px, block 5


def onednn(x, dy, padding):
    return tf.compat.v1.nn.conv2d_backprop_filter(x, [3, 3, x.shape[-1], dy.shape[-1]], dy, [1, 1, 1, 1], padding)


def by_matmul(x, dy, padding):
    if padding == "SAME":
        x = tf.pad(x, [[0, 0], [1, 1], [1, 1], [0, 0]])
    oh, ow, ic, oc = dy.shape[1], dy.shape[2], x.shape[-1], dy.shape[-1]
    windows = tf.concat([x[:, i:i + oh, j:j + ow, :] for i in range(3) for j in range(3)], axis=-1)
    dw = tf.matmul(tf.reshape(windows, [-1, 9 * ic]), tf.reshape(dy, [-1, oc]), transpose_a=True)
    return tf.reshape(dw, [3, 3, ic, oc])


def main():
    with open("/proc/cpuinfo") as f:
        info = f.read()
    name = next(line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name"))
    flags = [f for f in ("avx512f", "avx512_bf16", "amx_tile", "amx_bf16") if f" {f}" in info]
    print(f"{name}; {' '.join(flags)}; TF {tf.__version__}")
    for dtype in (tf.float32, tf.bfloat16):
        for batch, size, ic, oc, padding in SHAPES:
            out = size if padding == "SAME" else size - 2
            x = tf.cast(tf.random.stateless_normal([batch, size, size, ic], seed=[1, 2]), dtype)
            dy = tf.cast(tf.random.stateless_normal([batch, out, out, oc], seed=[3, 4]), dtype)
            flops = 2 * batch * out * out * ic * oc * 9
            results = {}
            for way in (onednn, by_matmul):
                step = tf.function(lambda x, dy, way=way: way(x, dy, padding))
                results[way.__name__] = tf.cast(step(x, dy), tf.float32).numpy()
                times = []
                for _ in range(5):
                    start = time.perf_counter()
                    for _ in range(3):
                        step(x, dy).numpy()
                    times.append((time.perf_counter() - start) / 3)
                ms = 1000 * float(np.median(times))
                reference = results["onednn"]
                difference = np.abs(results[way.__name__] - reference).max() / np.abs(reference).max()
                print(f"{dtype.name:8s} mb{batch} {size}x{size} ic{ic} oc{oc} {padding:5s} {way.__name__:9s} "
                      f"{ms:8.2f} ms {flops / ms / 1e6:7.1f} GFLOP/s  difference {difference:.1e}", flush=True)


if __name__ == "__main__":
    main()
