"""Each backbone of the images job trains a few steps under model_to_estimator and MirroredStrategy on
2 CPU replicas, in fp32 and bf16, with every --augment transform, exports, and the export classifies
files through serving.predict."""
import os

import pytest

from models import BACKBONES

from pipeline.flags import build_parser
from pipeline.roles import run
from pipeline.tasks.images import TASK
from serving.predict import classify_files, load_predictor
from tests.images_data import SHAPE_CLASSES, make_shapes_folder


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    return make_shapes_folder(str(tmp_path_factory.mktemp("shapes")), per_class=8)


# Building a large application's graph five times over (two replicas, evaluation, prediction, export)
# takes 30-90 s on a shared 2-core machine: by default the small ResNet (the default) and the small CNN in
# bf16 and VGG16 in fp32 run
# (tests/pipeline/test_checkpoint_format.py trains a BatchNormalization model on 2 replicas, and
# tests/scripts/test_train_images_cli.py the small CNN in fp32); IMAGES_BACKBONE_MATRIX=1 runs every
# backbone in both precisions.
FULL_MATRIX = [(b, p) for b in BACKBONES for p in ("fp32", "bf16")]
DEFAULT = [("small_resnet", "bf16"), ("small_cnn", "bf16"), ("vgg16", "fp32")]


@pytest.mark.parametrize("backbone,precision", FULL_MATRIX if os.environ.get("IMAGES_BACKBONE_MATRIX") else DEFAULT)
def test_backbone_trains_on_two_replicas_exports_and_predicts(shapes, tmp_path, backbone, precision):
    model_dir = str(tmp_path / "model")
    args = build_parser(TASK).parse_args([
        "--data-dir", shapes, "--model-dir", model_dir, "--model", backbone, "--weights", "none",
        "--channels", "1", "--image-size", "32", "--batch-size", "2", "--cpu-replicas", "2", "--max-steps", "2",
        "--precision", precision, "--warm-up-steps", "0", "--checkpoint-steps", "100",
        "--augment", "flip,rotate=10,zoom=0.1,translate=0.1,contrast=0.2"])
    results = run(TASK, args)
    assert results["replicas"] == 2 and results["global_step"] == 2 and results["precision"] == precision
    assert [name for name, _ in results["augment"]] == ["flip", "rotate", "zoom", "translate", "contrast"]
    assert results["eval_examples"] == 6 and sum(map(sum, results["confusion_matrix"])) == 6
    predictor = load_predictor(results["export_dir"])
    assert predictor.class_names == sorted(SHAPE_CLASSES)
    files = [f"{shapes}/circle/000.jpg", f"{shapes}/plus sign/001.png", f"{shapes}/square/004.bmp"]
    predicted = list(classify_files(predictor, files))
    assert [p["file"] for p in predicted] == files
    assert all(p["class"] in SHAPE_CLASSES and sum(p["probabilities"].values()) == pytest.approx(1, abs=1e-3)
               for p in predicted)
