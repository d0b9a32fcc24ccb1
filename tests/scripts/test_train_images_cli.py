"""The images job as a user with a folder of pictures runs it: train, evaluate, export, predict;
its split, its bad files, and the same picture served as PNG and JPEG."""
import csv
import json
import os
import re
import subprocess
import sys
import types

import numpy as np
import pytest
import tensorflow as tf

from input_fns import decode
from input_fns.image_list import ImageListConfig, make_input_fn
from tests.conftest import ROOT
from tests.images_data import SHAPE_CLASSES, draw_shape, encode, make_shapes_folder

SMALL = ["--image-size", "32", "--batch-size", "16", "--warm-up-steps", "1", "--log-steps", "100"]


def script(name, *argv):
    return subprocess.run([sys.executable, os.path.join(ROOT, "scripts", name), *argv],
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    return make_shapes_folder(str(tmp_path_factory.mktemp("pictures") / "shapes"), per_class=80)


def test_shapes_in_mixed_formats_train_to_high_accuracy_export_and_predict(shapes, tmp_path):
    model_dir = tmp_path / "model"
    result = script("train_images.py", "--data-dir", shapes, "--model-dir", str(model_dir), "--max-steps", "300",
                    "--seed", "1", *SMALL)
    assert result.returncode == 0, result.stderr[-3000:]
    results = json.loads((model_dir / "results.json").read_text())
    assert results["eval_accuracy"] >= 0.9, result.stdout
    assert results["eval_examples"] == 48 and results["train_examples"] == 174  # 20% of 80 per class held out
    assert results["validation_examples"] == 18  # and 10% of the rest
    assert results["class_names"] == ["circle", "plus sign", "square"] and results["channels"] == 3
    assert results["ignored_files"] == 3 and results["skipped_files"] == []
    test_list = (model_dir / "split" / "test.txt").read_text().splitlines()
    train_list = (model_dir / "split" / "train.txt").read_text().splitlines()
    assert len(test_list) == 48 and not set(test_list) & set(train_list)
    with open(model_dir / "test_scores.csv") as f:  # each score names its file, each test file once
        scored = [row["image"] for row in csv.DictReader(f)]
    assert sorted(scored) == sorted(os.path.join(shapes, name) for name in test_list)
    assert "plus sign precision" in result.stdout

    predicted = script("predict.py", "--model", str(model_dir / "export"), "--json", "--batch-size", "7",
                       os.path.join(shapes, "plus sign"))
    assert predicted.returncode == 0, predicted.stderr
    lines = [json.loads(line) for line in predicted.stdout.splitlines()]
    assert len(lines) == 80 and all(line["file"].startswith(os.path.join(shapes, "plus sign")) for line in lines)
    held_out = {os.path.join(shapes, f) for f in test_list if f.startswith("plus sign")}
    right = [line["class"] == "plus sign" for line in lines if line["file"] in held_out]
    assert len(right) == 16 and sum(right) >= 12

    # The same picture as a PNG and as a JPEG, neither seen in training: the same answer.
    picture = draw_shape("square", 48, np.random.default_rng(99))
    for name, (mode, fmt) in {"same.png": ("RGBA", "PNG"), "same.jpg": ("RGB", "JPEG")}.items():
        (tmp_path / name).write_bytes(encode(picture, mode, fmt))
    pair = script("predict.py", "--model", str(model_dir / "export"), "--json", str(tmp_path / "same.png"),
                  str(tmp_path / "same.jpg"), str(tmp_path / "absent.gif"))
    png, jpeg, absent = [json.loads(line) for line in pair.stdout.splitlines()]
    assert png["class"] == jpeg["class"] == "square"
    assert png["probabilities"] == pytest.approx(jpeg["probabilities"], abs=0.05)
    assert absent == {"file": str(tmp_path / "absent.gif"), "error": "file not found; check the path"} and pair.returncode == 1


@pytest.mark.parametrize("channels", [1, 3])
def test_the_export_decodes_each_format_as_training_does(tmp_path, channels):
    picture = draw_shape("circle", 40, np.random.default_rng(5))
    files = []
    for mode, fmt, ext in (("RGBA", "PNG", ".png"), ("RGB", "JPEG", ".jpg"), ("RGB", "GIF", ".gif"),
                           ("RGB", "BMP", ".bmp"), ("P", "PNG", ".png")):
        files.append(str(tmp_path / f"{len(files)}{ext}"))
        with open(files[-1], "wb") as f:
            f.write(encode(picture, mode, fmt))
    config = ImageListConfig(files, [0] * len(files), 2, (32, 32), channels, batch_size=8, training=False)
    (trained, _), = list(make_input_fn(config)().as_numpy_iterator())
    with tf.Graph().as_default():
        receiver = decode.make_serving_input_fn((32, 32), channels, bytes_key="image_bytes")()
        with tf.compat.v1.Session() as session:
            served = session.run(receiver.features["image"], {
                receiver.receiver_tensors["image_bytes"]: [open(f, "rb").read() for f in files]})
    np.testing.assert_array_equal(served, trained["image"])


def test_bad_files_are_named_in_one_line_or_skipped(tmp_path, capsys):
    data = make_shapes_folder(str(tmp_path / "data"), per_class=10)
    (tmp_path / "data" / "square" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 40)
    (tmp_path / "data" / "circle" / "one-bit.BMP").write_bytes(
        encode(draw_shape("circle", 24, np.random.default_rng(0)), "1", "BMP"))
    # A good image whose name is Latin-1, not UTF-8, as unzip leaves an old zip's names: TensorFlow cannot list it.
    with open(os.fsencode(tmp_path / "data" / "square") + b"/caf\xe9.png", "wb") as f:
        f.write(encode(draw_shape("square", 24, np.random.default_rng(0)), "RGB", "PNG"))
    common = ["--data-dir", data, "--max-steps", "2", *SMALL]
    from pipeline.cli import train_main  # in process: the same function as the script, without 10 s of start-up
    from pipeline.tasks.images import TASK
    assert train_main(TASK, ["--model-dir", str(tmp_path / "m1"), *common]) == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert all(f in last for f in ("one-bit.BMP is a 1-bit BMP", "(and 2 more bad files)", "--on-bad-image=skip"))
    skipped = script("train_images.py", "--model-dir", str(tmp_path / "m2"), "--on-bad-image", "skip",
                     "--class-weight", "balanced", *common)
    assert skipped.returncode == 0, skipped.stderr[-2000:]
    results = json.loads((tmp_path / "m2" / "results.json").read_text())
    assert sorted(os.path.basename(f) for f in results["skipped_files"]) == ["broken.png", "caf\udce9.png",
                                                                            "one-bit.BMP"]
    assert "is not UTF-8" in results["skipped_file_problems"][str(tmp_path / "data" / "square" / "caf\udce9.png")]
    assert results["class_weights"] == pytest.approx([1.0, 1.0, 1.0])
    assert "skipped: 3 files" in skipped.stdout


def test_images_whose_headers_read_but_whose_data_is_damaged_are_named_in_one_line_and_the_run_resumes(tmp_path,
                                                                                                      capsys):
    """A PNG whose data fails its checksum and a JPEG cut short and closed again pass the header checks; the
    decoder refuses them mid-run, and the run names them (it decodes every image to find them)."""
    from pipeline.cli import train_main
    from pipeline.tasks import images_job
    from pipeline.tasks.images import TASK
    data = make_shapes_folder(str(tmp_path / "data"), per_class=10)
    png, jpeg = (os.path.join(data, folder, name) for folder, name in (("circle", "001.png"), ("square", "000.jpg")))
    damaged = bytearray(open(png, "rb").read())
    start = damaged.find(b"IDAT") + 8
    damaged[start:start + 20] = bytes(b ^ 0x55 for b in damaged[start:start + 20])
    bad_png, bad_jpeg = os.path.join(data, "circle", "damaged.png"), os.path.join(data, "square", "cut.jpg")
    open(bad_png, "wb").write(bytes(damaged))
    whole = open(jpeg, "rb").read()
    open(bad_jpeg, "wb").write(whole[:len(whole) // 2] + b"\xff\xd9")
    argv = ["--data-dir", data, "--model-dir", str(tmp_path / "m"), "--max-steps", "3", *SMALL,
            "--bootstrap-resamples", "10"]
    assert train_main(TASK, argv) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    record = tmp_path / "m" / "undecodable_images.json"
    assert re.fullmatch(rf".*: error: {re.escape(bad_png)} cannot be decoded \(Invalid PNG data, size \d+\), though its "
                        rf"header reads well \(and 1 more: {re.escape(bad_jpeg)}\); the model dir remembers it "
                        rf"\({re.escape(str(record))}\): replace or remove it, or pass --on-bad-image skip to leave it "
                        "out, and run the same command to resume", err.strip().splitlines()[-1]), err[-2000:]
    assert sorted(json.loads(record.read_text())["files"]) == [bad_png, bad_jpeg]
    # The same command again: refused before training, naming the file, with no image decoded to find it
    images_job._DATASETS.clear()  # (a process scans a data dir once: this is another run)
    assert train_main(TASK, argv) == 1
    err = capsys.readouterr().err
    assert "decoding the" not in err and err.strip().splitlines()[-1].endswith(
        f"{bad_png} cannot be decoded (Invalid PNG data, size {os.path.getsize(bad_png)}), though its header reads well "
        f"(a run of this model dir met it: {record}); replace or remove it (and 1 more bad files), or pass "
        "--on-bad-image=skip to leave such files out"), err[-2000:]
    for bad, readable in ((bad_png, png), (bad_jpeg, jpeg)):
        open(bad, "wb").write(open(readable, "rb").read())
    images_job._DATASETS.clear()
    assert train_main(TASK, argv) == 0, capsys.readouterr().err[-2000:]
    assert json.loads((tmp_path / "m" / "results.json").read_text())["global_step"] == 3


def test_an_image_found_undecodable_days_into_a_run_is_left_out_and_the_run_goes_on_under_on_bad_image_skip(
        tmp_path, capsys):
    """A run that meets an image TensorFlow cannot decode (damaged since it started) need not start over. Under
    --on-bad-image skip the same command remembers it in the model dir and resumes without it; under 'fail' it
    stops naming it, and the next run is told before training. The split stays as it was (the validation images
    listed, none moved: drawn again without the image, they were others), and its epochs go on over the images
    left. Before, a run met the image again at each resume, and one without it was refused."""
    from pipeline.cli import train_main
    from pipeline.tasks import images_job
    from pipeline.tasks.images import TASK
    data = make_shapes_folder(str(tmp_path / "data"), per_class=12)
    model_dir = tmp_path / "m"
    argv = ["--data-dir", data, "--model-dir", str(model_dir), *SMALL, "--validation-fraction", "0.25",
            "--eval-every-steps", "2", "--bootstrap-resamples", "10"]

    def damage(png):  # (its header reads well; its data fails the checksum)
        damaged = bytearray(open(png, "rb").read())
        start = damaged.find(b"IDAT") + 8
        damaged[start:start + 20] = bytes(b ^ 0x55 for b in damaged[start:start + 20])
        open(png, "wb").write(bytes(damaged))

    def train(*flags):
        images_job._DATASETS.clear()  # (a process scans a data dir once: each call here is another run)
        code = train_main(TASK, [*argv, *flags])
        return code, capsys.readouterr().err
    assert train("--max-steps", "2")[0] == 0
    validation = (model_dir / "validation_files.txt").read_text()
    trained = [os.path.join(data, line) for line in (model_dir / "split" / "train.txt").read_text().splitlines()]
    first, second = [f for f in trained if f.endswith(".png") and f not in validation][:2]
    damage(first)
    code, err = train("--max-steps", "8", "--on-bad-image", "skip")
    assert code == 0, err[-3000:]
    assert f"{first} cannot be decoded (Invalid PNG data, size {os.path.getsize(first)}), though its header reads " \
           f"well: left out (--on-bad-image skip; {model_dir / 'undecodable_images.json'} remembers it), resuming " \
           "from the newest checkpoint without it" in err
    assert "1 fewer than this model dir's run counted its epochs on" in err
    results = json.loads((model_dir / "results.json").read_text())
    assert results["global_step"] == 8 and results["skipped_files"] == [first]
    assert (model_dir / "validation_files.txt").read_text() == validation
    # Removed instead: the split lists it, and it is no image gone astray (that was refused)
    os.remove(first)
    code, err = train("--max-steps", "10")
    assert code == 0 and json.loads((model_dir / "results.json").read_text())["global_step"] == 10, err[-2000:]
    # Under 'fail': named, and remembered for the next run, which is told before training (no image decoded)
    damage(second)
    code, err = train("--max-steps", "14")
    assert code == 1 and "the model dir remembers it" in err.strip().splitlines()[-1], err[-2000:]
    code, err = train("--max-steps", "14")
    assert code == 1 and "decoding the" not in err and err.strip().splitlines()[-1].endswith(
        f"{second} cannot be decoded (Invalid PNG data, size {os.path.getsize(second)}), though its header reads well "
        f"(a run of this model dir met it: {model_dir / 'undecodable_images.json'}); replace or remove it, or pass "
        "--on-bad-image=skip to leave such files out"), err[-2000:]
    os.remove(second)
    code, err = train("--max-steps", "14")
    assert code == 0 and json.loads((model_dir / "results.json").read_text())["global_step"] == 14, err[-2000:]
    assert (model_dir / "validation_files.txt").read_text() == validation


def test_a_class_folder_added_or_removed_since_the_split_is_named_in_one_line(tmp_path, capsys, monkeypatch):
    """It was refused later, as a checkpoint that does not fit the model (its last layer's shape), which
    named --image-size."""
    from pipeline.cli import train_main
    from pipeline.tasks import images_job
    from pipeline.tasks.images import TASK
    data = make_shapes_folder(str(tmp_path / "data"), per_class=6)
    argv = ["--data-dir", data, "--model-dir", str(tmp_path / "m"), "--max-steps", "1", *SMALL,
            "--validation-fraction", "0", "--bootstrap-resamples", "10"]
    assert train_main(TASK, argv) == 0
    assert "\n  channels:      3 (some images are in colour; a GIF counts as one)\n" in capsys.readouterr().out
    os.rename(os.path.join(data, "square"), os.path.join(data, "triangle"))
    monkeypatch.setattr(images_job, "_DATASETS", {})  # a process scans a data dir once: this is another run
    assert train_main(TASK, [*argv[:-6], "--max-steps", "2", *argv[-4:]]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].endswith(
        f"error: the class folders of {data} are not those the model dir {tmp_path / 'm'} was trained on (new: "
        "triangle; gone: square): its labels and outputs are those 3 classes; put the folders back as they were, or "
        "pass another --model-dir to train on these 3"), err[-2000:]


@pytest.mark.parametrize("argv,fragments,code", [
    ([], ["pass --data-dir with a folder of class folders"], 2),
    (["--data-dir", "{tmp}/absent"], ["--data-dir ", "absent: no such folder"], 2),
    (["--data-dir", "{data}", "--model", "resnet50"], ["ImageNet resnet50 weights", "--weights"], 1),
    (["--data-dir", "{data}", "--trainable-layers", "50"], ["--trainable-layers 50 is more than"], 2),
])
def test_what_cannot_run_is_one_line(tmp_path, monkeypatch, capsys, argv, fragments, code):
    """In process, through the function train_images.py runs (a subprocess each would cost 10 s)."""
    from pipeline.cli import train_main
    from pipeline.tasks.images import TASK
    data = make_shapes_folder(str(tmp_path / "data"), per_class=5)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no cached ImageNet weights, and no network
    argv = [a.format(tmp=tmp_path, data=data) for a in argv]
    assert train_main(TASK, [*argv, "--model-dir", str(tmp_path / "model"), "--max-steps", "1", *SMALL]) == code
    lines = capsys.readouterr().err.strip().splitlines()
    assert "Traceback" not in "\n".join(lines)
    assert ": error: " in lines[-1]
    assert all(fragment in lines[-1] for fragment in fragments), lines[-1]
    assert not os.path.exists(tmp_path / "model" / "split")  # a run that fails before training writes no split


@pytest.mark.parametrize("model_dir", ["{data}/run", "{data}/" + SHAPE_CLASSES[0] + "/run", "{link}/run", None])
def test_a_model_dir_inside_the_data_dir_is_refused_before_any_folder_is_made(tmp_path, monkeypatch, capsys,
                                                                              model_dir):
    # Every folder of the data dir is a class (the run's own would be one, its PNGs images), and a folder made
    # there would stay one after the failure. None: `--data-dir .` run from the data dir, the default model dir.
    from pipeline.cli import train_main
    from pipeline.tasks.images import TASK
    data = make_shapes_folder(str(tmp_path / "data"), per_class=5)
    os.symlink(data, tmp_path / "link")
    before = sorted(os.walk(data))
    if model_dir is None:
        monkeypatch.chdir(data)
        argv = ["--data-dir", "."]
    else:
        argv = ["--data-dir", data, "--model-dir", model_dir.format(data=data, link=tmp_path / "link")]
    assert train_main(TASK, [*argv, "--max-steps", "1", *SMALL]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "is inside --data-dir" in err.strip().splitlines()[-1] and "pass a --model-dir outside it" in err
    assert sorted(os.walk(data)) == before


@pytest.mark.parametrize("data_dir, model_dir, refused", [
    ("{d}", "{d}", True), ("{d}/", "{d}", True), (".", ".", True), (".", "runs/images", True),
    ("{d}", "{d}/cats/run", True), ("{d}", "{d}-runs/one", False),  # a sibling whose name starts the same
    (".", "gs://bucket/run", False), ("gs://bucket/data", "gs://bucket/data/run", True),
    ("gs://bucket/data", "gs://bucket/data2", False), ("gs://bucket/data/", "gs://bucket/data", True),
])
def test_where_a_model_dir_lies_against_the_data_dir(tmp_path, monkeypatch, data_dir, model_dir, refused):
    from pipeline.errors import FlagError
    from pipeline.tasks.images import check_model_dir_outside_data_dir
    monkeypatch.chdir(tmp_path)
    settings = types.SimpleNamespace(synthetic=False, data_dir=data_dir.format(d=tmp_path),
                                     model_dir=model_dir.format(d=tmp_path))
    if refused:
        with pytest.raises(FlagError, match="--data-dir"):
            check_model_dir_outside_data_dir(settings)
    else:
        check_model_dir_outside_data_dir(settings)


@pytest.mark.parametrize("first, resumed, fragments", [
    # a model that pools globally takes any size: without the record's check it trained on at the new one
    (["--image-size", "32"], ["--image-size", "48"], ["the checkpoints in", "--image-size 32"]),
    # unfrozen layers have no optimizer state in the checkpoint (a restore that failed with exit 1), and
    # frozen ones stop learning mid-run
    (["--trainable-layers", "3"], ["--trainable-layers", "5"],
     ["--trainable-layers 5 cannot resume the checkpoints in", "trained with --trainable-layers 3"]),
    ([], ["--trainable-layers", "3"], ["trained with every backbone layer trainable (--weights none"]),
], ids=["image-size", "more-trainable-layers", "fewer-trainable-layers"])
def test_a_resume_with_another_graph_is_one_line_and_changes_nothing(tmp_path, capsys, first, resumed, fragments):
    from pipeline.cli import train_main
    from pipeline.tasks.images import TASK
    data, model_dir = make_shapes_folder(str(tmp_path / "data"), per_class=5), tmp_path / "model"
    flags = ["--data-dir", data, "--model-dir", str(model_dir), "--model", "small_resnet", "--validation-fraction",
             "0", "--bootstrap-resamples", "10", "--batch-size", "4", "--warm-up-steps", "1"]
    size = [] if "--image-size" in first else ["--image-size", "32"]
    assert train_main(TASK, [*flags, *size, *first, "--max-steps", "2"]) == 0
    before = {p.name: p.read_bytes() for p in model_dir.iterdir() if p.is_file()}
    capsys.readouterr()
    assert train_main(TASK, [*flags, *size, *resumed, "--max-steps", "4"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and all(fragment in lines[0] for fragment in fragments), lines
    assert {p.name: p.read_bytes() for p in model_dir.iterdir() if p.is_file()} == before
    assert train_main(TASK, [*flags, *size, *first, "--max-steps", "4"]) == 0  # the same flags go on
    assert json.loads((model_dir / "results.json").read_text())["global_step"] == 4


def test_classes_called_none_or_with_a_comma_can_be_the_referral_classes(tmp_path, capsys):
    # Class folders are any names: '"none","a, b"' names two of them in --positive-classes (CSV's quoting).
    from pipeline.cli import train_main
    from pipeline.tasks.images import TASK
    data = make_shapes_folder(str(tmp_path / "data"), per_class=8)
    names = {"circle": "none", "square": "a, b"}
    for shape, name in names.items():
        os.rename(os.path.join(data, shape), os.path.join(data, name))
    model_dir = tmp_path / "model"
    assert train_main(TASK, ["--data-dir", data, "--model-dir", str(model_dir), "--max-steps", "1",
                             "--validation-fraction", "0", "--bootstrap-resamples", "20", "--positive-classes",
                             '"none","a, b"', *SMALL]) == 0, capsys.readouterr().err[-2000:]
    results = json.loads((model_dir / "results.json").read_text())
    assert results["clinical"]["referral"]["positive_classes"] == ["none", "a, b"]
    assert sorted(results["class_names"]) == sorted(["none", "a, b", SHAPE_CLASSES[2]])
