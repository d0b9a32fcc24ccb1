"""A Conv2D's weight gradient as one matrix product, for the layers where oneDNN's own kernel is slow:
on CPUs with AMX, oneDNN 3.2 (TensorFlow 2.15's) computes a bfloat16 convolution's weight gradient at
0.03-0.15 of the chip's peak when its input has many channels and few positions (VGG16's block 5
at 64 px: 4x4), while a matmul of the same FLOPs runs on its AMX brgemm kernels
(docs/benchmarks.md, "bf16 on a Xeon with AMX").

A convolution's weight gradient is the input's shifted windows (kh x kw slices of the padded input,
side by side) transposed, times the output's gradient. `gradients_by_matmul()` is the graph scope
whose Conv2D ops take it; the input gradient stays oneDNN's (as a matmul it was slower at every
shape measured but one), and each op outside `by_matmul`'s shapes keeps TensorFlow's gradients."""
import contextlib

import tensorflow as tf
from tensorflow.python.ops import gen_nn_ops, nn_grad  # TF 2.15's, frozen: the Conv2D gradient it registers

GRADIENT_NAME = "Conv2DWeightsByMatmul"
# On the Xeon with AMX measured (bfloat16 3x3 kernels, docs/benchmarks/amx-conv-gradients-alone.txt), the matmul
# took 0.20-0.83 of oneDNN's time with 64 to 512 input channels (outputs 3x3 to 14x14) and 1.6-2.7x its time
# with 1 and 32. Other kernel sizes were not measured, so they keep oneDNN's kernel.
KERNEL_SIZE = (3, 3)
MIN_INPUT_CHANNELS = 64
MAX_OUTPUT_POSITIONS = 14 * 14  # the largest measured; larger outputs keep oneDNN's kernel


def by_matmul(op):
    """Returns whether the Conv2D `op` takes its weight gradient as a matmul: a 3x3 kernel, stride and dilation 1,
    NHWC, SAME or VALID padding, sizes known, at least MIN_INPUT_CHANNELS input channels and at most
    MAX_OUTPUT_POSITIONS output positions an image."""
    if op.get_attr("data_format") != b"NHWC" or op.get_attr("padding") not in (b"SAME", b"VALID"):
        return False
    if list(op.get_attr("strides")) != [1, 1, 1, 1] or list(op.get_attr("dilations")) != [1, 1, 1, 1]:
        return False
    x, w = op.inputs
    out = op.outputs[0]
    if not (x.shape[1:].is_fully_defined() and w.shape.is_fully_defined() and out.shape[1:].is_fully_defined()):
        return False
    if x.shape[-1] != w.shape[2] or tuple(w.shape[:2]) != KERNEL_SIZE:  # a grouped convolution, another kernel
        return False
    return w.shape[2] >= MIN_INPUT_CHANNELS and out.shape[1] * out.shape[2] <= MAX_OUTPUT_POSITIONS


def _padded(x, kernel, padding):
    if padding != b"SAME":
        return x
    (kh, kw), pads = kernel, []
    for k in (kh, kw):
        pads.append([(k - 1) // 2, k - 1 - (k - 1) // 2])
    return tf.pad(x, [[0, 0]] + pads + [[0, 0]])


def weight_gradient(x, grad, kernel_shape, output_size, padding):
    """Returns the gradient of a stride-1 NHWC Conv2D's kernel (`kernel_shape`: kh, kw, ic, oc; `output_size`:
    the output's height and width) as one matmul."""
    kh, kw, ic, oc = kernel_shape
    oh, ow = output_size
    x = _padded(x, (kh, kw), padding)
    windows = tf.concat([x[:, i:i + oh, j:j + ow, :] for i in range(kh) for j in range(kw)], axis=-1)
    dw = tf.matmul(tf.reshape(windows, [-1, kh * kw * ic]), tf.reshape(grad, [-1, oc]), transpose_a=True)
    return tf.reshape(dw, [kh, kw, ic, oc])


@tf.RegisterGradient(GRADIENT_NAME)
def _conv2d_gradient(op, grad):
    if not by_matmul(op):
        return nn_grad._Conv2DGrad(op, grad)
    x, w = op.inputs
    input_grad = gen_nn_ops.conv2d_backprop_input(
        tf.shape(x), w, grad, strides=op.get_attr("strides"), padding=op.get_attr("padding"),
        dilations=op.get_attr("dilations"), use_cudnn_on_gpu=op.get_attr("use_cudnn_on_gpu"), data_format="NHWC")
    return input_grad, weight_gradient(x, grad, w.shape, op.outputs[0].shape[1:3], op.get_attr("padding"))


def gradients_by_matmul(enabled):
    """Returns the scope in which built Conv2D ops take their weight gradients as matmuls where by_matmul says
    (a graph's gradient override), or a scope that changes nothing when not `enabled` or already inside one.

    The override map is the graph's, shared by the threads MirroredStrategy builds its replicas' model_fns in;
    each thread restores on exit what it found on entry, so only the first scope entered sets it (and the last
    one out, having found nothing, leaves nothing)."""
    graph = tf.compat.v1.get_default_graph()
    if not enabled or graph._gradient_override_map.get("Conv2D") == GRADIENT_NAME:  # TF 2.15's, frozen
        return contextlib.nullcontext()
    return graph.gradient_override_map({"Conv2D": GRADIENT_NAME})
