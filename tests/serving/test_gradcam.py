"""Grad-CAM from an export: on images whose class only one small patch decides, the heatmap's
top cell covers the patch."""
import io
import os

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from input_fns.decode import make_serving_input_fn
from models.fashion_cnn import build_fashion_cnn
from serving.export import export_model
from serving.gradcam import GradCam, explain_files, heatmap_source, source_digest

SIZE, PATCH = 64, 8
CLASSES = ["BRIGHT", "DARK"]
# The small CNN's last convolution (valid 3x3 convolutions, two 2x2 poolings) gives a 12x12
# grid whose cell i is centred on input pixel 4i + 8.5 and 4 pixels apart: patches are placed
# where cells are centred.
STRIDE, FIRST_CENTRE = 4, 8.5


def patch_images(n, rng):
    """Returns (uint8 [n, 64, 64, 1] noisy gray images, labels, patch corners): an 8x8 patch, bright
    for class 0 and dark for class 1, at a random place."""
    images = rng.normal(110, 25, size=(n, SIZE, SIZE)).clip(0, 255)
    labels = rng.integers(0, 2, n)
    corners = rng.integers(6, SIZE - PATCH - 6, size=(n, 2))
    for image, label, (y, x) in zip(images, labels, corners):
        image[y:y + PATCH, x:x + PATCH] = 240 if label == 0 else 0
    return images.astype(np.uint8)[..., None], labels, corners


def jpeg(image):
    buffer = io.BytesIO()
    Image.fromarray(image[..., 0]).save(buffer, "JPEG", quality=95)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def patch_export(tmp_path_factory):
    """The small CNN at 64 px trained on patch images, exported with the JPEG serving input."""
    tf.keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    images, labels, _ = patch_images(600, rng)
    model = build_fashion_cnn(3e-3, input_shape=(SIZE, SIZE, 1), num_classes=2, input_dtype="uint8")
    model.fit(images, tf.keras.utils.to_categorical(labels, 2), epochs=6, batch_size=32, verbose=0)
    model_dir = str(tmp_path_factory.mktemp("patch-model"))
    estimator = tf.keras.estimator.model_to_estimator(keras_model=model, model_dir=model_dir)
    return export_model(estimator, make_serving_input_fn((SIZE, SIZE), 1), CLASSES, model_dir + "/export")


def test_the_top_cell_of_the_heatmap_covers_the_patch(patch_export):
    images, labels, corners = patch_images(20, np.random.default_rng(1))
    gradcam = GradCam(patch_export)
    probabilities, explained, heatmaps = gradcam.explain([jpeg(i) for i in images])
    assert gradcam.layer.startswith("conv2d") and heatmaps.shape == (20, 12, 12)
    assert (probabilities.argmax(1) == labels).all() and (explained == labels).all()
    for heatmap, (y, x) in zip(heatmaps, corners):
        row, column = np.unravel_index(heatmap.argmax(), heatmap.shape)
        top, left = FIRST_CENTRE + STRIDE * row - STRIDE / 2, FIRST_CENTRE + STRIDE * column - STRIDE / 2
        assert top < y + PATCH and y < top + STRIDE and left < x + PATCH and x < left + STRIDE, (row, column, y, x)
    _, explained, other = gradcam.explain([jpeg(i) for i in images[:2]], class_index=1)
    assert (explained == 1).all() and np.isfinite(other).all()


def test_explain_files_writes_a_heatmap_png_per_image_of_the_class_printed(patch_export, tmp_path):
    """Each heatmap explains the class its entry names, the one predict.py printed: under --tta that is
    the mean over views', which need not be the plain image's (it explained the plain image's)."""
    images, labels, _ = patch_images(3, np.random.default_rng(2))
    results = []
    for i, (image, label) in enumerate(zip(images, labels)):
        path = tmp_path / f"scan-{i}.jpeg"
        path.write_bytes(jpeg(image))
        printed = CLASSES[1 - label] if i == 0 else CLASSES[label]  # the first as if the views disagreed
        results.append({"file": str(path), "class": printed})
    results.append({"file": "missing.jpeg", "error": "file not found"})
    gradcam = GradCam(patch_export)
    predicted, _, _ = gradcam.explain([jpeg(i) for i in images])
    assert (predicted.argmax(1) == labels).all()
    explain_files(gradcam, results, str(tmp_path / "out"))
    for entry in results[:3]:
        with Image.open(entry["heatmap"]) as png:
            assert png.format == "PNG" and png.size == (SIZE, SIZE) and png.mode == "RGB"
        assert entry["explained_class"] == entry["class"]
    assert "heatmap" not in results[3]
    explain_files(gradcam, results[:3], str(tmp_path / "dark"), class_index=1)  # --explain-class DARK
    assert [entry["explained_class"] for entry in results[:3]] == ["DARK"] * 3


def test_a_rerun_into_the_same_folder_replaces_only_the_heatmaps_of_the_same_files(patch_export, tmp_path):
    """--explain into a folder again replaced the heatmaps of other images of the same name, and any file
    named like one."""
    images, _, _ = patch_images(2, np.random.default_rng(3))
    for folder, image in zip(("a", "b"), images):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "scan.jpeg").write_bytes(jpeg(image))
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.gradcam.png").write_text("mine\n")
    (tmp_path / "notes.jpeg").write_bytes(jpeg(images[0]))
    gradcam = GradCam(patch_export)

    def explain(*files):
        results = explain_files(gradcam, [{"file": str(tmp_path / f), "class": CLASSES[0]} for f in files], str(out))
        return [os.path.basename(entry["heatmap"]) for entry in results]
    assert explain("a/scan.jpeg") == ["scan.gradcam.png"]
    first = (out / "scan.gradcam.png").read_bytes()
    assert explain("b/scan.jpeg", "notes.jpeg") == ["scan.2.gradcam.png", "notes.2.gradcam.png"]
    assert (out / "scan.gradcam.png").read_bytes() == first and (out / "notes.gradcam.png").read_text() == "mine\n"
    assert explain("a/scan.jpeg", "b/scan.jpeg") == ["scan.gradcam.png", "scan.2.gradcam.png"]  # each its own again
    assert heatmap_source(str(out / "scan.2.gradcam.png")) == source_digest(str(tmp_path / "b" / "scan.jpeg"))
    assert str(tmp_path).encode() not in (out / "scan.2.gradcam.png").read_bytes()  # no path travels with it
    assert sorted(os.listdir(out)) == ["notes.2.gradcam.png", "notes.gradcam.png", "scan.2.gradcam.png",
                                       "scan.gradcam.png"]


def test_an_export_replaced_by_a_newer_best_while_it_loads_is_explained_from_the_newest(patch_export, tmp_path,
                                                                                          monkeypatch):
    """GradCam of a model dir a run validates in: the run's new best replaced the export it had chosen, whose load
    then failed, and it stopped there (predict.py's classifier took the newest)."""
    import shutil
    from serving import gradcam as gradcam_module
    export = tmp_path / "export"
    shutil.copytree(patch_export, export / "1700000000")
    built = []
    original_build = GradCam._build

    def replaced_while_loading(self):
        built.append(os.path.basename(self.export_dir))
        if len(built) == 1:
            os.rename(export / "1700000000", export / "1800000000")
        return original_build(self)
    monkeypatch.setattr(gradcam_module.GradCam, "_build", replaced_while_loading)
    gradcam = GradCam(str(tmp_path))
    assert built == ["1700000000", "1800000000"] and gradcam.export_dir == str(export / "1800000000")
    images, labels, _ = patch_images(4, np.random.default_rng(4))
    assert (gradcam.explain([jpeg(i) for i in images])[0].argmax(1) == labels).all()
    gradcam.close()
    for shard in (export / "1800000000" / "variables").glob("variables.data-*"):
        shard.write_bytes(b"damaged")
    with pytest.raises(tf.errors.OpError):  # still there: the export's own error, not a retry
        GradCam(str(tmp_path))
    assert built[2:] == ["1800000000"]


def test_predict_py_explains_the_export_that_classified(patch_export, tmp_path, monkeypatch):
    """predict.py --explain resolved --model again for the heatmaps: a run beside that exported a new best in
    between had the classes from one model and the heatmaps from another."""
    import shutil
    import scripts.predict as predict_script
    from serving import gradcam as gradcam_module, predict
    export = tmp_path / "export"
    shutil.copytree(patch_export, export / "1700000000")
    original_load = predict._saved_model_predictor

    def then_a_new_best(export_dir):
        loaded = original_load(export_dir)
        shutil.copytree(patch_export, export / "1800000000")
        return loaded
    monkeypatch.setattr(predict, "_saved_model_predictor", then_a_new_best)
    explained = []
    monkeypatch.setattr(gradcam_module.GradCam, "_build",
                        lambda self, build=gradcam_module.GradCam._build: (explained.append(self.export_dir),
                                                                            build(self))[1])
    image = tmp_path / "scan.jpeg"
    image.write_bytes(jpeg(patch_images(1, np.random.default_rng(5))[0][0]))
    args = predict_script.build_parser().parse_args(["--model", str(tmp_path), "--explain", str(tmp_path / "maps"),
                                                     "--json", str(image)])
    assert predict_script.predict(args) == 0
    assert explained == [str(export / "1700000000")]
    assert os.listdir(tmp_path / "maps") == ["scan.gradcam.png"]


def test_a_file_name_that_is_not_utf_8_and_a_16_bit_scan_get_their_heatmaps(patch_export, tmp_path):
    """A name that is not UTF-8 ended predict.py --explain in a traceback (its digest encoded it strictly), and
    a 16-bit PNG's heatmap was drawn over a white square (PIL's convert clips 16-bit gray at 255)."""
    image = patch_images(1, np.random.default_rng(6))[0][0]
    odd = os.path.join(os.fsdecode(bytes(tmp_path)), os.fsdecode(b"caf\xe9.png"))
    Image.fromarray(image[..., 0]).save(odd)
    wide = tmp_path / "scan16.png"
    Image.fromarray(image[..., 0].astype(np.uint16) * 257).save(wide)
    gradcam = GradCam(patch_export)
    results = explain_files(gradcam, [{"file": odd, "class": CLASSES[0]}, {"file": str(wide), "class": CLASSES[0]}],
                            str(tmp_path / "out"))
    gradcam.close()
    assert os.path.basename(results[0]["heatmap"]) == os.fsdecode(b"caf\xe9.gradcam.png")
    assert heatmap_source(results[0]["heatmap"]) == source_digest(odd)
    with Image.open(results[0]["heatmap"]) as plain, Image.open(results[1]["heatmap"]) as deep:
        difference = np.abs(np.asarray(plain, np.int16) - np.asarray(deep, np.int16))
    assert difference.max() <= 1  # the 16-bit scan's overlay is the 8-bit one's


def test_a_custom_gradient_loaded_in_another_process_is_differentiated_as_autodiff_would():
    """EfficientNet's swish is a tf.custom_gradient, whose gradient is registered by name only in the
    process that built it: --eval-only and predict.py --explain of an efficientnet_b0 export ended in
    'No gradient defined for operation top_activation/IdentityN'."""
    from serving.gradcam import differentiable
    built = tf.Graph()
    with built.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [5], name="x")
        tf.identity(tf.nn.silu(x), name="y")
    graph = tf.Graph()
    with graph.as_default():
        definition = built.as_graph_def()
        for node in definition.node:  # as another process would name it: no gradient registered here
            if "_gradient_op_type" in node.attr:
                node.attr["_gradient_op_type"].s = b"CustomGradient-from-another-process"
        tf.compat.v1.import_graph_def(definition, name="")
        x, y = graph.get_tensor_by_name("x:0"), graph.get_tensor_by_name("y:0")
        with pytest.raises(LookupError, match="No gradient defined"):
            tf.gradients(y, x)
        assert differentiable(graph) == 1
        gradient = tf.gradients(y, x)[0]
        values = np.array([-3.0, -0.5, 0.0, 0.7, 4.0], np.float32)
        with tf.compat.v1.Session(graph=graph) as session:
            got = session.run(gradient, {x: values})
    sigmoid = 1 / (1 + np.exp(-values))
    np.testing.assert_allclose(got, sigmoid * (1 + values * (1 - sigmoid)), rtol=1e-5)  # swish's derivative
