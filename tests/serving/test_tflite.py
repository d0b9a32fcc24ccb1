"""Exports for devices (--tflite, serving.tflite): a short Fashion run on the real sample converts its
export's pixels signature to float32, float16 and int8 TFLite; each file is checked here against the
SavedModel run by the test itself, predict.py answers from a .tflite as from the export, and the OCT
job's pixels signature converts too."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from acquisition.fashion_mnist import CLASS_NAMES, load_split
from input_fns.decode import PIXELS_SIGNATURE, decode_and_resize
from pipeline.cli import train_main
from pipeline.flag_types import tflite_kinds
from pipeline.results import recorded_here
from pipeline.tasks import fashion, oct as oct_task
from serving import tflite
from serving.predict import classify_files, load_predictor
from tests.conftest import ROOT, assert_clean_failure

KINDS = ("float32", "float16", "int8")
FASHION_RUN = ["--batch-size", "16", "--lr-scaling", "none", "--max-steps", "40", "--eval-every-steps", "20",
               "--warm-up-steps", "1", "--bootstrap-resamples", "10", "--seed", "1"]


def script(name, *argv):
    return subprocess.run([sys.executable, os.path.join(ROOT, "scripts", name), *argv],
                          capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def fashion_run(fashion_data_dir, tmp_path_factory):
    """(results.json, the tflite.json written beside the files, model dir, stdout, stderr) of 40 steps on the real
    sample's training images with --tflite float32,float16,int8."""
    model_dir = str(tmp_path_factory.mktemp("fashion-tflite"))
    result = script("train_fashion.py", "--data-dir", fashion_data_dir, "--model-dir", model_dir, *FASHION_RUN,
                    "--tflite", "int8,float32,float16")
    assert result.returncode == 0, result.stderr[-3000:]
    with open(os.path.join(model_dir, "results.json")) as f:
        results = json.load(f)
    with open(os.path.join(results["tflite"]["dir"], tflite.FIGURES_FILE)) as f:
        return results, json.load(f), model_dir, result.stdout, result.stderr


def test_the_converters_own_summaries_stay_out_of_the_log(fashion_run):
    """The converter's C++ prints its op summary and quantizer settings straight to stderr, whatever the log
    level: held back unless --verbose."""
    log = fashion_run[4]
    assert "TFLite int8" in log and "TFLite float16" in log  # the job's own lines stay
    assert "non-converted ops" not in log and "fully_quantize" not in log, log[-3000:]


@pytest.fixture(scope="module")
def reference(fashion_run, fashion_data_dir):
    """(test images uint8 [200, 28, 28, 1], labels, the SavedModel's probabilities [200, 10]) run here."""
    images, labels = load_split(fashion_data_dir, "test")
    signature = tf.saved_model.load(fashion_run[0]["export_dir"]).signatures[PIXELS_SIGNATURE]
    probabilities = signature(gray_pixels=tf.constant(images[..., None]))["probabilities"].numpy()
    return images[..., None], np.asarray(labels), probabilities


def run_tflite(path, images):
    """Returns the probabilities of the .tflite file at `path` for uint8 `images`, through its own
    Interpreter (one image at a time)."""
    interpreter = tf.lite.Interpreter(model_path=path)
    runner = interpreter.get_signature_runner(PIXELS_SIGNATURE)
    return np.concatenate([runner(gray_pixels=image[None])["probabilities"] for image in images])


def test_each_file_is_written_beside_the_export_with_its_figures(fashion_run):
    results, written, model_dir, stdout, _ = fashion_run
    record, export_dir = results["tflite"], results["export_dir"]
    assert record == written
    assert record["dir"] == os.path.join(model_dir, "export", "tflite", os.path.basename(export_dir))
    assert sorted(record["files"]) == sorted(KINDS) and record["test_images"] == results["eval_examples"] == 200
    with open(os.path.join(record["dir"], "class_names.txt")) as f:
        assert f.read().splitlines() == list(CLASS_NAMES)
    for kind, figures in record["files"].items():
        assert figures["file"] == os.path.join(record["dir"], f"{kind}.tflite")
        assert figures["bytes"] == os.path.getsize(figures["file"])
        assert figures["accuracy_change"] == pytest.approx(figures["accuracy"] - record["saved_model_accuracy"],
                                                           abs=1e-5)
        assert 0 < figures["latency_ms"] < 1000
    baseline, *lines = [line for line in stdout.splitlines() if line.startswith("  tflite:  ")]
    assert baseline == (f"  tflite:  the SavedModel's accuracy {record['saved_model_accuracy']:.4f} on the 200 test "
                        "images, one view each, is what each file's change is against")  # (--tta's eval line: a mean)
    assert [line.split()[1] for line in lines] == list(KINDS)  # one line a file, in this order
    for (kind, figures), line in zip(sorted(record["files"].items(), key=lambda kv: KINDS.index(kv[0])), lines):
        assert line.endswith(figures["file"]) and f"accuracy {figures['accuracy']:.4f}" in line
    # the export's pixels signature scored the test images as the run's own evaluation did (a tie aside)
    assert abs(record["saved_model_accuracy"] - results["eval_accuracy"]) <= 1 / 200 + 1e-9
    assert record["calibration_images"] == tflite.CALIBRATION_IMAGES and record["cpu"]
    assert record["files"]["int8"]["over_tolerance"] == (
        record["saved_model_accuracy"] - record["files"]["int8"]["accuracy"] > record["tolerance"])
    assert ("WARNING" in stdout) == record["files"]["int8"]["over_tolerance"]


def test_float32_agrees_with_the_saved_model_run_independently(fashion_run, reference):
    record = fashion_run[0]["tflite"]
    images, labels, expected = reference
    got = run_tflite(record["files"]["float32"]["file"], images)
    assert np.abs(got - expected).max() < 1e-4
    agreement = np.mean(got.argmax(1) == expected.argmax(1))
    assert agreement >= 0.99
    assert record["files"]["float32"]["agreement"] == pytest.approx(agreement, abs=1 / 200 + 1e-9)
    assert record["saved_model_accuracy"] == pytest.approx(np.mean(expected.argmax(1) == labels), abs=1e-6)


@pytest.mark.parametrize("kind,largest_difference", [("float16", 0.01), ("int8", 0.2)])
def test_smaller_kinds_are_recorded_as_measured_here(fashion_run, reference, kind, largest_difference):
    record = fashion_run[0]["tflite"]
    images, labels, expected = reference
    got = run_tflite(record["files"][kind]["file"], images)
    assert np.abs(got - expected).max() < largest_difference
    assert record["files"][kind]["accuracy"] == pytest.approx(np.mean(got.argmax(1) == labels), abs=1 / 200 + 1e-9)
    assert record["files"][kind]["agreement"] == pytest.approx(np.mean(got.argmax(1) == expected.argmax(1)),
                                                               abs=1 / 200 + 1e-9)


def test_int8_is_smaller_and_computes_in_integers(fashion_run):
    files = fashion_run[0]["tflite"]["files"]
    assert files["int8"]["bytes"] < files["float16"]["bytes"] < files["float32"]["bytes"]
    assert files["int8"]["bytes"] < 0.4 * files["float32"]["bytes"]
    interpreter = tf.lite.Interpreter(model_path=files["int8"]["file"])
    kinds = {d["name"]: d["dtype"] for d in interpreter.get_tensor_details()}
    weights = [name for name, dtype in kinds.items() if "conv" in name.lower() and dtype == np.int8]
    assert weights, kinds
    layers = {op["op_name"] for op in interpreter._get_ops_details()}
    assert {"CONV_2D", "FULLY_CONNECTED"} <= layers  # kept as layers, their weights int8 (TFLITE_BUILTINS_INT8)
    assert interpreter.get_input_details()[0]["dtype"] == np.uint8


def test_predict_answers_from_a_tflite_file_as_from_the_export(fashion_run, reference, tmp_path):
    results = fashion_run[0]
    images = reference[0]
    for i, image in enumerate(images):
        Image.fromarray(image[..., 0]).save(tmp_path / f"{i:03d}.png")
    (tmp_path / "raw.gray").write_bytes(images[0].tobytes())
    answers = {}
    for model in (fashion_run[2], results["tflite"]["files"]["float32"]["file"]):
        result = script("predict.py", "--model", model, "--json", "--batch-size", "7", str(tmp_path))
        assert result.returncode == 0, result.stderr[-2000:]
        answers[model] = [json.loads(line) for line in result.stdout.splitlines()]
    saved, lite = answers.values()
    assert len(saved) == len(lite) == 201
    assert [r["file"] for r in saved] == [r["file"] for r in lite]
    assert [r["class"] for r in saved] == [r["class"] for r in lite]
    for a, b in zip(saved, lite):
        assert list(a["probabilities"]) == list(CLASS_NAMES) == list(b["probabilities"])
        assert np.allclose(list(a["probabilities"].values()), list(b["probabilities"].values()), atol=1e-4)


def test_predict_refuses_a_tflite_file_without_its_class_names(fashion_run, tmp_path):
    lone = tmp_path / "model.tflite"
    with open(fashion_run[0]["tflite"]["files"]["float32"]["file"], "rb") as f:
        lone.write_bytes(f.read())
    result = script("predict.py", "--model", str(lone), str(tmp_path))
    assert_clean_failure(result, "no class_names.txt beside", str(lone))


def test_predict_refuses_a_damaged_tflite_file_in_one_line(fashion_run, tmp_path):
    """TensorFlow's interpreter reads a .tflite unchecked: a truncated file crashed predict.py (SIGSEGV)."""
    with open(fashion_run[0]["tflite"]["files"]["float32"]["file"], "rb") as f:
        whole = f.read()
    shutil.copy(os.path.join(fashion_run[0]["tflite"]["dir"], "class_names.txt"), tmp_path)
    Image.fromarray(np.zeros((28, 28), np.uint8)).save(tmp_path / "image.png")
    for name, data, fragment in [("cut.tflite", whole[:5000], "is not a whole TFLite model (5,000 bytes: its parts run past its end"),
                                 ("end.tflite", whole[:-1], "is not a whole TFLite model"),
                                 ("tiny.tflite", whole[:100], "is not a whole TFLite model"),
                                 ("text.tflite", b"not a model\n", "is not a TFLite model (it lacks the TFL3 mark)")]:
        (tmp_path / name).write_bytes(data)
        result = script("predict.py", "--model", str(tmp_path / name), str(tmp_path / "image.png"))
        assert result.returncode == 1, (name, result.returncode, result.stderr[-500:])
        assert_clean_failure(result, fragment, str(tmp_path / name))


def test_predict_given_the_tflite_folder_names_a_file_in_it(fashion_run, tmp_path):
    """It took the numbered folder of .tflite files for an export: 'SavedModel file does not exist'."""
    Image.fromarray(np.zeros((28, 28), np.uint8)).save(tmp_path / "image.png")
    folder = os.path.dirname(fashion_run[0]["tflite"]["dir"])
    result = script("predict.py", "--model", folder, str(tmp_path / "image.png"))
    assert result.returncode == 1
    assert_clean_failure(result, f"{folder} holds TFLite files, not a SavedModel: pass one of them to --model, "
                                 f"e.g. {fashion_run[0]['tflite']['dir']}")


def test_predict_refuses_class_names_that_do_not_match_the_model(fashion_run, tmp_path):
    """Class names from another run beside a .tflite raised an IndexError; in an export, three names for ten
    outputs showed three probabilities under the wrong names, exit 0."""
    (tmp_path / "lite").mkdir()
    shutil.copy(fashion_run[0]["tflite"]["files"]["float32"]["file"], tmp_path / "lite")
    (tmp_path / "lite" / "class_names.txt").write_text("a\nb\nc\n")
    export = tmp_path / "export"
    shutil.copytree(fashion_run[0]["export_dir"], export)
    (export / "assets.extra" / "class_names.txt").write_text("a\nb\nc\n")
    Image.fromarray(np.zeros((28, 28), np.uint8)).save(tmp_path / "image.png")
    for model, names in [(tmp_path / "lite" / "float32.tflite", tmp_path / "lite" / "class_names.txt"),
                         (export, export / "assets.extra" / "class_names.txt")]:
        result = script("predict.py", "--model", str(model), str(tmp_path / "image.png"))
        assert result.returncode == 1
        assert_clean_failure(result, f"{names} names 3 classes but the model at {model} has 10 outputs")


def test_bf16_with_tflite_is_refused_before_anything_is_made(tmp_path):
    result = script("train_fashion.py", "--synthetic", "--precision", "bf16", "--tflite", "float32",
                    "--model-dir", str(tmp_path / "m"))
    assert result.returncode == 2 and not (tmp_path / "m").exists()
    assert_clean_failure(result, "--precision bf16: --tflite converts the export, and TFLite has no bfloat16 tensors")


def test_converting_a_bf16_export_later_is_one_line_before_the_evaluation(tmp_path):
    """--eval-only --tflite on a model dir trained with --precision bf16: the converter's failure on bfloat16
    tensors was a traceback, then 31 lines of the converter's after the whole evaluation."""
    model_dir = str(tmp_path / "m")
    # Batch 250: each run evaluates the 10,000 synthetic test images (before converting) in 40 steps.
    synthetic = ["--synthetic", "--max-steps", "2", "--batch-size", "250", "--bootstrap-resamples", "10"]
    assert train_main(fashion.TASK, [*synthetic, "--precision", "bf16", "--model-dir", model_dir]) == 0
    result = script("train_fashion.py", *synthetic, "--precision", "fp32", "--model-dir", model_dir, "--eval-only",
                    "--tflite", "float32")
    assert result.returncode == 2 and "evaluating on" not in result.stderr
    assert_clean_failure(result, f"--tflite: the export in {model_dir} was trained with --precision bf16, whose "
                                 "bfloat16 tensors TFLite cannot hold; drop --tflite, or convert a run trained with "
                                 "--precision fp32 or bf16-amp")


def test_a_resume_in_fp32_converting_a_validated_bf16_run_is_refused_before_training(fashion_data_dir, tmp_path,
                                                                                     capfd):
    """Resumed in fp32 with --tflite, a run that validated in bf16 trained on, then its best export (of a
    bf16 step) failed to convert at the end, in the converter's lines, leaving results.json behind the
    checkpoints."""
    model_dir = str(tmp_path / "m")
    flags = ["--data-dir", fashion_data_dir, "--model-dir", model_dir, "--batch-size", "32", "--eval-every-steps",
             "1", "--bootstrap-resamples", "10"]
    assert train_main(fashion.TASK, [*flags, "--max-steps", "2", "--precision", "bf16"]) == 0
    capfd.readouterr()
    before = tf.train.latest_checkpoint(model_dir)
    with open(os.path.join(model_dir, "validation.json")) as f:
        best = json.load(f)["best"]["step"]
    assert train_main(fashion.TASK, [*flags, "--max-steps", "4", "--precision", "fp32", "--tflite", "float32"]) == 2
    err = capfd.readouterr().err
    assert err.strip().splitlines()[-1].endswith(  # the prog: pytest's in this process
        f": error: --tflite: the best model validation kept in {model_dir} (step {best}) was trained with --precision "
        "bf16, whose bfloat16 tensors TFLite cannot hold; drop --tflite, or pass another --model-dir"), err[-2000:]
    assert tf.train.latest_checkpoint(model_dir) == before and "Traceback" not in err


def test_a_resumed_deterministic_run_s_int8_file_is_the_straight_run_s(fashion_data_dir, tmp_path):
    """int8 calibrated on the training input as the run left it: a resumed --deterministic run's starts where
    the run stood, so its file differed from a straight run's, every time."""
    def int8_file(model_dir, *max_steps):
        flags = ["--data-dir", fashion_data_dir, "--model-dir", model_dir, "--deterministic", "--seed", "1",
                 "--batch-size", "16", "--validation-fraction", "0", "--bootstrap-resamples", "10", "--precision",
                 "fp32", "--tflite", "int8"]
        for steps in max_steps:  # each a process of its own, as a user's runs (the seeds are a process's)
            result = script("train_fashion.py", *flags, "--max-steps", str(steps))
            assert result.returncode == 0, result.stderr[-2000:]
        with open(os.path.join(model_dir, "results.json")) as f:
            with open(json.load(f)["tflite"]["files"]["int8"]["file"], "rb") as model:
                return model.read()
    assert int8_file(str(tmp_path / "resumed"), 6, 12) == int8_file(str(tmp_path / "straight"), 12)


@pytest.mark.parametrize("value", ["int4", "float32,float32", "float32,", "fp16"])
def test_a_bad_tflite_value_exits_2_in_one_line(tmp_path, value):
    result = script("train_fashion.py", "--synthetic", "--model-dir", str(tmp_path / "m"), "--tflite", value)
    assert result.returncode == 2 and not (tmp_path / "m").exists()
    assert_clean_failure(result, "--tflite", "expected some of float32,float16,int8")


def test_kinds_are_parsed_into_one_order():
    assert tflite_kinds("int8, FLOAT32") == ("float32", "int8")
    assert tflite_kinds("none") == ()


def test_an_int8_file_losing_more_than_the_tolerance_is_flagged_with_a_loud_line():
    tally = tflite._Tally()
    tally.add(np.eye(4)[[0, 1, 2, 0]], np.eye(4), np.arange(4))  # 3 of 4 right, against the SavedModel's 4
    figures = tflite._file_figures("/x/int8.tflite", 100, tally, 4, 1.0, 0.5, "int8", 0.2)
    assert figures["over_tolerance"] and figures["accuracy_change"] == -0.25
    record = {"files": {"int8": figures}, "test_images": 4,
              "warnings": [tflite._warning("int8", figures, 1.0, 0.2)]}
    lines = tflite.summary_lines(record)
    assert len(lines) == 2 and "WARNING: the int8 TFLite model loses 0.2500 accuracy" in lines[1]
    assert not tflite._file_figures("/x/int8.tflite", 100, tally, 4, 1.0, 0.5, "int8", 0.25)["over_tolerance"]


def test_figures_kept_from_an_earlier_conversion_are_held_against_the_tolerance_asked_now(tmp_path):
    int8 = {"file": "/old/int8.tflite", "accuracy": 0.9, "over_tolerance": False}
    (tmp_path / "int8.tflite").write_bytes(b"model")
    (tmp_path / tflite.FIGURES_FILE).write_text(json.dumps({"test_images": 10, "saved_model_accuracy": 1.0,
                                                            "tolerance": 0.2, "files": {"int8": int8}}))
    kept = tflite._earlier_figures(str(tmp_path), ("float32",), 10, 1.0, tolerance=0.05)["files"]["int8"]
    assert kept["over_tolerance"] and kept["file"] == str(tmp_path / "int8.tflite")
    assert not tflite._earlier_figures(str(tmp_path), ("float32",), 10, 1.0, tolerance=0.2)["files"]["int8"][
        "over_tolerance"]
    assert tflite._earlier_figures(str(tmp_path), ("float32",), 11, 1.0, tolerance=0.2) == {}  # other test images


def test_eval_only_converts_a_trained_model_dir_again(fashion_run, fashion_data_dir, tmp_path, capsys):
    """Under --deterministic (exports.md's way to the same int8 file each time), though the run trained without
    it: --eval-only trains nothing, and was refused as a resume that could not be reproduced."""
    results, _, trained_dir, _ = fashion_run[:4]
    model_dir = str(tmp_path / "copy")  # converted again in a copy: the other tests read the run's own files
    shutil.copytree(trained_dir, model_dir)
    with open(os.path.join(model_dir, "results.json")) as f:
        before = f.read()
    result = script("train_fashion.py", "--data-dir", fashion_data_dir, "--model-dir", model_dir, *FASHION_RUN,
                    "--eval-only", "--tflite", "int8", "--tflite-tolerance", "0", "--deterministic")
    assert result.returncode == 0, result.stderr[-3000:]
    converted = os.path.join(model_dir, os.path.relpath(results["tflite"]["dir"], trained_dir))
    with open(os.path.join(converted, tflite.FIGURES_FILE)) as f:
        record = json.load(f)
    # the int8 file converted again; the figures of the two converted before kept, for the files beside them
    assert sorted(record["files"]) == ["float16", "float32", "int8"] and record["tolerance"] == 0
    assert record["files"]["int8"]["file"] == os.path.join(converted, "int8.tflite")
    for kind in ("float16", "float32"):
        kept = {k: v for k, v in record["files"][kind].items() if k != "file"}
        assert kept == {k: v for k, v in results["tflite"]["files"][kind].items() if k != "file"}
        assert record["files"][kind]["file"] == os.path.join(converted, f"{kind}.tflite")
    assert [l[:17] for l in result.stdout.splitlines() if l.startswith("  tflite:")] == \
        ["  tflite:  the Sa", "  tflite:  float3", "  tflite:  float1", "  tflite:  int8  "]
    lost = record["files"]["int8"]["accuracy"] < record["saved_model_accuracy"]
    assert record["files"]["int8"]["over_tolerance"] == lost and ("WARNING: the int8" in result.stdout) == lost
    with open(os.path.join(model_dir, "results.json")) as f:
        assert f.read() == before  # --eval-only writes no results.json; tflite.json holds its figures
    # the finished run asked again reprints its summary: the int8 line of the file there now, not the one replaced
    from pipeline.run_output import print_summary
    print_summary(recorded_here(json.loads(before), model_dir), "results.json")
    (int8_line,) = [l for l in capsys.readouterr().out.splitlines() if l.startswith("  tflite:  int8")]
    assert int8_line == [l for l in tflite.summary_lines(record) if l.startswith("  tflite:  int8")][0]
    # that of a run trained without --tflite, whose export --eval-only converted later: its files too (none before)
    without = {key: value for key, value in json.loads(before).items() if key != "tflite"}
    print_summary(recorded_here(without, model_dir), "results.json")
    expected, printed = tflite.summary_lines(record), capsys.readouterr().out.splitlines()
    assert expected[0] in printed, printed  # (with the int8 file's WARNING line where it lost accuracy)
    assert printed[printed.index(expected[0]):][:len(expected)] == expected
    moved = str(tmp_path / "moved")  # and after the model dir moved: the files where they are now
    shutil.copytree(model_dir, moved)
    print_summary(recorded_here(json.loads(before), moved), "results.json")
    files = [l.split()[-1] for l in capsys.readouterr().out.splitlines() if l.startswith("  tflite:  ") and
             l.split()[1] in ("float32", "float16", "int8")]
    assert len(files) == 3 and all(f.startswith(moved + os.sep) and os.path.isfile(f) for f in files), files


def test_the_oct_jobs_pixels_signature_converts_and_agrees(oct_tree, tmp_path, capsys):
    """With --decode reduced: the .tflite client decoded files in full, the export reduced (2e-3 apart)."""
    model_dir = str(tmp_path / "oct")
    common = ["--data-dir", os.path.dirname(oct_tree), "--model-dir", model_dir, "--max-steps", "4", "--image-size",
              "32", "--weights", "none", "--batch-size", "8", "--warm-up-steps", "1", "--bootstrap-resamples", "10",
              "--on-bad-image", "skip"]
    assert train_main(oct_task.TASK, [*common, "--tflite", "float32,int8", "--decode", "reduced"]) == 0
    capsys.readouterr()
    # evaluated (or resumed) with the default --decode full: other pixels than the weights and export know
    assert train_main(oct_task.TASK, [*common, "--eval-only"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith(
        f"error: --decode full: the checkpoints in {model_dir} were trained with --decode reduced; resume (or "
        "evaluate) with --decode reduced, or pass another --model-dir")
    with open(os.path.join(model_dir, "results.json")) as f:
        results = json.load(f)
    record = results["tflite"]
    assert sorted(record["files"]) == ["float32", "int8"] and record["test_images"] == results["eval_examples"]
    signature = tf.saved_model.load(results["export_dir"]).signatures[PIXELS_SIGNATURE]
    (name, spec), = signature.structured_input_signature[1].items()
    assert spec.dtype == tf.uint8 and spec.shape.as_list() == [None, 32, 32, 1]
    scans = sorted(os.path.join(root, n) for root, _, names in os.walk(os.path.join(oct_tree, "test")) for n in names)
    images = np.stack([decode_and_resize(tf.io.read_file(p), (32, 32), 1).numpy() for p in scans])
    expected = signature(**{name: tf.constant(images)})["probabilities"].numpy()
    runner = tf.lite.Interpreter(model_path=record["files"]["float32"]["file"]).get_signature_runner(PIXELS_SIGNATURE)
    got = runner(**{name: images})["probabilities"]
    assert np.abs(got - expected).max() < 1e-4 and (got.argmax(1) == expected.argmax(1)).all()
    assert record["files"]["int8"]["bytes"] < 0.4 * record["files"]["float32"]["bytes"]
    predictors = [load_predictor(m) for m in (results["export_dir"], record["files"]["float32"]["file"])]
    assert [p.fast_decode for p in predictors] == [True, True]  # decode.txt in assets.extra, and beside the file
    saved, lite = (list(classify_files(p, scans[:6])) for p in predictors)
    assert [r["class"] for r in saved] == [r["class"] for r in lite] and len(saved) == 6
    assert np.allclose([list(r["probabilities"].values()) for r in saved],
                       [list(r["probabilities"].values()) for r in lite], atol=1e-4)
    # A PNG of a scan: decoded in full, not refused as 'Invalid JPEG data' by both.
    from PIL import Image
    with Image.open(scans[0]) as scan:
        scan.convert("L").save(tmp_path / "scan.png")
    for predictor, by_jpeg in zip(predictors, (saved, lite)):
        from_png, = classify_files(predictor, [str(tmp_path / "scan.png")])
        assert "error" not in from_png, from_png
        assert np.allclose(list(from_png["probabilities"].values()), list(by_jpeg[0]["probabilities"].values()),
                           atol=0.05)


def test_explain_refuses_a_tflite_file_in_one_line(tmp_path):
    result = script("predict.py", "--model", str(tmp_path / "m.tflite"), "--explain", str(tmp_path / "maps"),
                    str(tmp_path))
    assert result.returncode == 2 and not (tmp_path / "maps").exists()
    assert_clean_failure(result, "--explain reads the gradients of the SavedModel export")


def test_int8_calibrates_on_each_distinct_training_image_once():
    """A training set smaller than CALIBRATION_IMAGES repeats in its stream: 36 images gave '200' before."""
    images = np.random.default_rng(0).integers(0, 256, (36, 8, 8, 1), dtype=np.uint8)

    def train_input_fn():  # as a training input: shuffled, repeated, in batches
        data = tf.data.Dataset.from_tensor_slices(({"image": images}, np.arange(36) % 3))
        return data.shuffle(36, seed=1).repeat().batch(16)
    calibration = tflite.calibration_images(train_input_fn)
    assert len(calibration) == 36 < tflite.CALIBRATION_IMAGES
    assert sorted(image.tobytes() for image in calibration) == sorted(image.tobytes() for image in images)
    first = next(iter(train_input_fn()))[0]["image"].numpy()
    assert np.array_equal(calibration[:16], first)  # in the order the input gave them
