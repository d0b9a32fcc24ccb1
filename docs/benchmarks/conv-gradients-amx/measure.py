"""A Conv2D's weight and input gradients, oneDNN's kernels (Conv2DBackpropFilter, Conv2DBackpropInput)
against pipeline.conv_gradients' matmuls, for the layer shapes of the Fashion CNN (batch 512) and VGG16
(64 px batch 64, 224 px batch 32), in bf16 and fp32. Prints one line per shape, pass and way: median ms
of 5 x 3 calls, GFLOP/s, and the largest difference from oneDNN's result relative to its largest value.

    PYTHONPATH=. python docs/benchmarks/conv-gradients-amx/measure.py
"""
import sys
import time

import numpy as np
import tensorflow as tf

from pipeline import conv_gradients
from pipeline.machine import read_cpuinfo

# (batch, input height = width, input channels, output channels, padding)
SHAPES = [(512, 28, 1, 32, "VALID"), (512, 13, 32, 64, "VALID"), (512, 5, 64, 64, "VALID"),  # Fashion CNN
          (64, 4, 512, 512, "SAME"), (64, 8, 512, 512, "SAME"), (64, 8, 256, 512, "SAME"),  # VGG16 64 px
          (32, 14, 512, 512, "SAME")]  # VGG16 224 px, block 5


def input_by_matmul(w, grad, input_shape, padding):
    """The input gradient as one matmul, each window's rows added back at its place (tried, not kept: slower
    than oneDNN's kernel at every shape measured but one)."""
    kh, kw, ic, oc = w.shape
    oh, ow = grad.shape[1], grad.shape[2]
    height, width = input_shape
    rows = tf.matmul(tf.reshape(grad, [-1, oc]), tf.reshape(w, [kh * kw * ic, oc]), transpose_b=True)
    windows = tf.reshape(rows, [-1, oh, ow, kh * kw, ic])
    padded_h, padded_w = oh + kh - 1, ow + kw - 1
    placed = [tf.pad(windows[:, :, :, i * kw + j, :], [[0, 0], [i, padded_h - oh - i], [j, padded_w - ow - j], [0, 0]])
              for i in range(kh) for j in range(kw)]
    top, left = (padded_h - height) // 2, (padded_w - width) // 2  # SAME's padding; 0 for VALID
    return tf.add_n(placed)[:, top:top + height, left:left + width, :]


def ways(padding, x, w, dy):
    strides, pad = [1, 1, 1, 1], padding
    return {
        ("weights", "onednn"): lambda: tf.compat.v1.nn.conv2d_backprop_filter(x, w.shape, dy, strides, pad),
        ("weights", "matmul"): lambda: conv_gradients.weight_gradient(x, dy, w.shape, dy.shape[1:3], pad.encode()),
        ("input", "onednn"): lambda: tf.compat.v1.nn.conv2d_backprop_input(x.shape, w, dy, strides, pad),
        ("input", "matmul"): lambda: input_by_matmul(w, dy, x.shape[1:3], pad.encode()),
    }


def main():
    cpu = read_cpuinfo()
    flags = [f for f in ("avx512f", "avx512_bf16", "amx_tile", "amx_bf16") if f in cpu.get("flags", "").split()]
    print(f"{cpu.get('model name')}; {' '.join(flags)}; TF {tf.__version__}", flush=True)
    dtypes = [tf.bfloat16, tf.float32] if len(sys.argv) < 2 else [getattr(tf, name) for name in sys.argv[1:]]
    for dtype in dtypes:
        for batch, size, ic, oc, padding in SHAPES:
            out = size if padding == "SAME" else size - 2
            x = tf.cast(tf.random.stateless_normal([batch, size, size, ic], seed=[1, 2]), dtype)
            w = tf.cast(tf.random.stateless_normal([3, 3, ic, oc], seed=[5, 6]), dtype)
            dy = tf.cast(tf.random.stateless_normal([batch, out, out, oc], seed=[3, 4]), dtype)
            flops = 2 * batch * out * out * ic * oc * 9
            results = {}
            for (grad, way), fn in ways(padding, x, w, dy).items():
                step = tf.function(fn)
                results[grad, way] = tf.cast(step(), tf.float32).numpy()
                times = []
                for _ in range(5):
                    start = time.perf_counter()
                    for _ in range(3):
                        step().numpy()
                    times.append((time.perf_counter() - start) / 3)
                ms = 1000 * float(np.median(times))
                reference = results[grad, "onednn"]
                difference = np.abs(results[grad, way] - reference).max() / np.abs(reference).max()
                print(f"{dtype.name:8s} mb{batch} {size}x{size} ic{ic} oc{oc} {padding:5s} {grad:7s} {way:6s} "
                      f"{ms:8.2f} ms {flops / ms / 1e6:7.1f} GFLOP/s  difference {difference:.1e}", flush=True)


if __name__ == "__main__":
    main()
