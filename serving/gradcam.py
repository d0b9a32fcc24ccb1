"""Where a model looked: Grad-CAM heatmaps (Selvaraju et al. 2017) computed from an export.

The export's graph is loaded into a TF1 session, not rebuilt from the training
code: the heatmap belongs to the model that serves. Its last convolution is
found in the graph (the backbone's: VGG16's block5_conv3 at 64 pixels is a 4x4
grid), with the activation that follows it. For an image and a class the map
is ReLU(sum over channels of the activation times the channel's mean gradient
of the class score), the score being the class's logit (the softmax's input).
"""
import hashlib
import io
import os

import numpy as np
import tensorflow as tf
from tensorflow.python.util import deprecation

from acquisition import storage
from acquisition.png_text import png_text
from input_fns.decode import PIXELS_SIGNATURE
from serving.export import CLASS_NAMES_FILE, PROBABILITIES, read_class_names, softmax_logits
from serving.predict import HEATMAP_SOURCE_KEY as SOURCE_KEY, is_pixels_name, load_newest_export, read_pixels

_CONVOLUTIONS = ("Conv2D", "DepthwiseConv2dNative")
_FOLLOWERS = ("BiasAdd", "Relu", "Relu6", "Elu", "Selu", "Identity", "FusedBatchNormV3", "Cast")
_PASS_THROUGH = "GradCamPassThrough"


@tf.RegisterGradient(_PASS_THROUGH)
def _pass_through(unused_op, *gradients):
    """An IdentityN's gradient: each output's to its input."""
    return list(gradients)


def differentiable(graph):
    """Makes a loaded graph's custom-gradient ops differentiable again; returns how many it changed.

    tf.custom_gradient (Keras's swish, in EfficientNet) marks an IdentityN over its result and inputs
    with a gradient registered by name in the process that built it: in any other process tf.gradients
    finds none. Passing each output's gradient through to the result, whose ops are in the graph, gives
    autodiff's gradient of the same function (a custom gradient that changes it, as a clip does, is lost)."""
    marked = [op for op in graph.get_operations() if op.type == "IdentityN" and "_gradient_op_type" in op.node_def.attr]
    for op in marked:
        op._set_attr("_gradient_op_type", tf.compat.v1.AttrValue(s=_PASS_THROUGH.encode()))  # noqa: SLF001
    return len(marked)


def _last_convolution(graph):
    """Returns (the output of the last convolution and the activation following it, the layer's name)."""
    convolutions = [op for op in graph.get_operations() if op.type in _CONVOLUTIONS]
    if not convolutions:
        raise ValueError("the exported model has no convolution to explain")
    tensor = convolutions[-1].outputs[0]
    while len(tensor.consumers()) == 1 and tensor.consumers()[0].type in _FOLLOWERS:
        tensor = tensor.consumers()[0].outputs[0]
    return tensor, convolutions[-1].name.rsplit("/", 1)[0]


def _one_input(graph, signature):
    """Returns the tensor of a SignatureDef's one input in `graph`."""
    (info,) = signature.inputs.values()
    return graph.get_tensor_by_name(info.name)


class GradCam:
    """An export loaded for explanation: `explain(contents, class_index=None)` of image files, or
    `explain(pixels, class_index, pixels=True)` of raw pixels when the export takes them (`pixels_shape`)."""

    def __init__(self, path):
        load_newest_export(path, self._load)

    def _load(self, export_dir):
        self.export_dir = export_dir
        self.class_names = read_class_names(storage.join(self.export_dir, "assets.extra", CLASS_NAMES_FILE))
        self._graph = tf.Graph()
        self._session = tf.compat.v1.Session(graph=self._graph)
        try:
            self._build()
        except BaseException:
            self._session.close()
            raise

    def _build(self):
        with self._graph.as_default():
            with deprecation.silence():  # "use tf.saved_model.load": which gives no graph to differentiate
                meta = tf.compat.v1.saved_model.loader.load(self._session, ["serve"], self.export_dir)
            signature = meta.signature_def["serving_default"]
            self._input = _one_input(self._graph, signature)  # the files' contents
            self._pixels, self.pixels_shape = None, None
            if PIXELS_SIGNATURE in meta.signature_def:  # uint8 [n, height, width, channels]
                self._pixels = _one_input(self._graph, meta.signature_def[PIXELS_SIGNATURE])
                self.pixels_shape = tuple(self._pixels.shape[1:])
            self._probabilities = self._graph.get_tensor_by_name(signature.outputs[PROBABILITIES].name)
            self._activation, self.layer = _last_convolution(self._graph)
            differentiable(self._graph)
            self._target = tf.compat.v1.placeholder(tf.int32, [None], name="gradcam_class")
            scores = softmax_logits(self._probabilities)
            scores = self._probabilities if scores is None else scores
            chosen = tf.reduce_sum(tf.gather(scores, self._target, batch_dims=1))
            gradient = tf.gradients(chosen, self._activation)[0]
            weights = tf.reduce_mean(tf.cast(gradient, tf.float32), axis=[1, 2], keepdims=True)
            self._map = tf.nn.relu(tf.reduce_sum(weights * tf.cast(self._activation, tf.float32), axis=-1))

    def explain(self, contents, class_index=None, pixels=False):
        """Returns (probabilities [n, classes], the explained class per image [n], heatmaps [n, h, w] of the
        last convolution's grid) for a list of image file contents (or, with `pixels`, uint8 pixels
        [n, *pixels_shape]): for `class_index` (one for all, or one an image), or each image's predicted
        class when None."""
        feed = {self._pixels if pixels else self._input: contents}
        probabilities = self._session.run(self._probabilities, feed)
        targets = (probabilities.argmax(axis=1) if class_index is None
                   else np.broadcast_to(class_index, (len(contents),))).astype(np.int32)
        heatmaps = self._session.run(self._map, {**feed, self._target: targets})
        return probabilities, targets, heatmaps

    def close(self):
        self._session.close()


def overlay(image, heatmap, alpha=0.45):
    """Returns a uint8 RGB array: `image` (a PIL image) with `heatmap` (any grid, scaled to its
    maximum) upsampled over it in the 'jet' colours."""
    from matplotlib import colormaps
    from PIL import Image
    rgb = _display_rgb(image)
    peak = float(heatmap.max())
    scaled = (heatmap / peak if peak > 0 else np.zeros_like(heatmap)).astype(np.float32)
    grid = Image.fromarray(scaled, mode="F").resize(image.size, Image.BILINEAR)
    colours = colormaps["jet"](np.clip(np.asarray(grid), 0, 1))[..., :3] * 255
    return np.clip((1 - alpha) * rgb + alpha * colours, 0, 255).astype(np.uint8)


def _display_rgb(image):
    """Returns the PIL `image` as float32 RGB from 0 to 255: a 16-bit gray one scaled down (PIL's convert clips
    it at 255, a white square), as the model's decoder reads it."""
    if image.mode.startswith("I"):
        return np.repeat(np.asarray(image, np.float32)[..., None] / 257, 3, axis=-1)
    return np.asarray(image.convert("RGB"), np.float32)


def write_heatmap_png(image, heatmap, out_path, source=None):
    """Writes `image` (a PIL image) with `heatmap` over it as a PNG at `out_path`, with source_digest(`source`),
    the file it explains, in its SOURCE_KEY text; returns the path."""
    from PIL import Image, PngImagePlugin
    info = PngImagePlugin.PngInfo()
    if source:
        info.add_text(SOURCE_KEY, source_digest(source))
    Image.fromarray(overlay(image, heatmap)).save(out_path, "PNG", pnginfo=info)
    return out_path


def source_digest(source):
    """Returns the sha256 (hex) of the path `source`, as a heatmap of it records it (of its bytes: a name that is
    not UTF-8 comes as Python's surrogate escapes)."""
    return hashlib.sha256(source.encode("utf-8", "surrogateescape")).hexdigest()


def heatmap_source(path):
    """Returns source_digest of the file the heatmap PNG at `path` explains, or None: not one of ours."""
    return png_text(path, SOURCE_KEY)


def _read(gradcam, path):
    """Returns (the input explain takes for the file at `path`, whether it is pixels, its PIL image)."""
    from PIL import Image
    if is_pixels_name(path):  # predict.py classified it: its size is the export's
        pixels, _ = read_pixels(path, gradcam.pixels_shape)
        return pixels, True, Image.fromarray(pixels[..., 0] if pixels.shape[-1] == 1 else pixels)
    contents = storage.read_bytes(path)
    image = Image.open(io.BytesIO(contents))  # in memory: nothing to close
    image.load()
    return contents, False, image


def explain_files(gradcam, results, out_dir, class_index=None, batch_size=32):
    """Writes a heatmap PNG into `out_dir` for each classified entry of `results` (classify_files's
    dicts), adding 'heatmap' (its path) and 'explained_class' to the entry; returns `results`. Each
    explains `class_index`, or when None the class the entry names: the class printed, which under
    --tta is the mean over views' and may not be the plain image's."""
    os.makedirs(out_dir, exist_ok=True)
    readable = [r for r in results if "error" not in r]
    used = set()
    for start in range(0, len(readable), batch_size):
        for pixels in (False, True):  # image files and raw pixel files, each kind fed to its own input
            batch = [(entry, *_read(gradcam, entry["file"])) for entry in readable[start:start + batch_size]
                     if is_pixels_name(entry["file"]) == pixels]
            if not batch:
                continue
            inputs = [data for _, data, _, _ in batch]
            classes = class_index if class_index is not None else [
                gradcam.class_names.index(entry["class"]) for entry, _, _, _ in batch]
            _, targets, heatmaps = gradcam.explain(np.stack(inputs) if pixels else inputs, classes, pixels)
            for (entry, _, _, image), target, heatmap in zip(batch, targets, heatmaps):
                source = storage.absolute(entry["file"])
                name = _heatmap_name(out_dir, source, used)
                entry["heatmap"] = write_heatmap_png(image, heatmap, os.path.join(out_dir, name), source)
                entry["explained_class"] = gradcam.class_names[int(target)]
    return results


def _heatmap_name(out_dir, source, used):
    """Returns '<stem>.gradcam.png' for the file `source`, numbered when `used` (updated) has it or `out_dir`
    holds a file of that name that is not a heatmap of `source` (an earlier run's of another file, or not ours)."""
    stem, digest = os.path.splitext(os.path.basename(source))[0], source_digest(source)
    name, n = f"{stem}.gradcam.png", 1
    while name in used or (os.path.lexists(os.path.join(out_dir, name))
                           and heatmap_source(os.path.join(out_dir, name)) != digest):
        n += 1
        name = f"{stem}.{n}.gradcam.png"
    used.add(name)
    return name
