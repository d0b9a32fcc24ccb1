"""The images job's split in the model dir: written once, reused on resume, and guarded."""
import json
import os
import re
import shutil
import types

import pytest

from acquisition import class_folders, storage

from acquisition.errors import InputDataError
from input_fns import CROP_VIEWS
from pipeline.errors import FlagError
from pipeline.flags import build_parser
from pipeline.tasks import images_job
from pipeline.tasks.images import TASK
from tests.images_data import make_shapes_folder


def args_for(data, model_dir, *extra):
    return build_parser(TASK).parse_args(["--data-dir", data, "--model-dir", model_dir, "--image-size", "32", *extra])


def test_the_split_is_listed_in_the_model_dir_and_reused(tmp_path, monkeypatch):
    data, model_dir = make_shapes_folder(str(tmp_path / "data"), per_class=10), str(tmp_path / "model")
    first = images_job.load_dataset(args_for(data, model_dir))
    first.save_split()
    assert not os.path.exists(model_dir)  # no run's model dir (inspect_input.py, say): nothing written
    os.makedirs(model_dir)  # as training has by the time its input is built
    assert not os.path.exists(os.path.join(model_dir, "split"))  # written once training starts: see save_split
    first.save_split()
    listed = (tmp_path / "model" / "split" / "test.txt").read_text().splitlines()
    assert [os.path.join(data, f) for f in listed] == first.splits["test"][0] and len(listed) == 6
    images_job._DATASETS.clear()
    (tmp_path / "data" / "circle" / "added.png").write_bytes((tmp_path / "data" / "circle" / "001.png").read_bytes())
    again = images_job.load_dataset(args_for(data, model_dir))
    assert again.splits == first.splits  # the new image is left out, not drawn into either side
    images_job._DATASETS.clear()
    monkeypatch.chdir(tmp_path)  # resumed with the same folder named relative to the working dir: the same
    relative = images_job.load_dataset(args_for("data", model_dir))  # absolute names, which test_scores.csv and
    assert relative.splits == first.splits and os.path.isabs(first.splits["test"][0][0])  # results.json hold

    with pytest.raises(FlagError, match=r"was split with --test-fraction=0.2, not with --test-fraction=0.5; pass "
                                        r"--test-fraction=0.2 to go on"):
        images_job.load_dataset(args_for(data, model_dir, "--test-fraction", "0.5"))
    with pytest.raises(FlagError, match=r"was split without --group-by, not with --group-by=-\(\\d\+\)-; drop "
                                        "--group-by to go on"):  # not 'pass --group-by None'
        images_job.load_dataset(args_for(data, model_dir, r"--group-by=-(\d+)-"))
    with pytest.raises(FlagError, match="was trained on .*data, not .*other; pass that --data-dir"):
        images_job.load_dataset(args_for(make_shapes_folder(str(tmp_path / "other"), per_class=3), model_dir))
    os.symlink(data, tmp_path / "linked")  # the same folder through a link: refused as another one
    images_job._DATASETS.clear()
    through_link = images_job.load_dataset(args_for(str(tmp_path / "linked"), model_dir))
    assert through_link.splits["test"][1] == first.splits["test"][1]
    assert [os.path.relpath(f, tmp_path / "linked") for f in through_link.splits["test"][0]] == \
        [os.path.relpath(f, data) for f in first.splits["test"][0]]
    os.remove(first.splits["test"][0][0])
    images_job._DATASETS.clear()
    with pytest.raises(InputDataError, match=r"listed in .*test.txt, is no longer an image of the data dir"):
        images_job.load_dataset(args_for(data, model_dir))


def test_a_finished_run_notes_the_finishing_flags_it_did_not_apply_and_what_it_finished_with():
    from types import SimpleNamespace
    from pipeline.run_output import finishing_flags_not_applied
    results = {"tflite": {"files": {"float32": {}, "int8": {}}}, "tta": ["identity", "flip"],
               "clinical": {"referral": {"positive_classes": ["circle"], "at_specificity": {"target": 0.95}}}}
    def asked(**flags):  # the referral's flags as given on the command line, or their defaults
        return SimpleNamespace(**{"tta": (), "calibrate": "none", "tflite": (), "positive_classes": ("circle",),
                                  "at_specificity": 0.95, **flags, "explicit_flags": frozenset(flags)})
    assert finishing_flags_not_applied(results, asked(tflite=("float32",))) == []  # converted more kinds
    assert finishing_flags_not_applied(results, asked(tflite=("int8", "float32"))) == []
    assert finishing_flags_not_applied(results, asked(tflite=("float16",))) == [
        "--tflite float16 (it finished with float32,int8)"]
    # trained in bf16: --eval-only would refuse the conversion (training_record.check_convertible), so it is not
    # one of the flags it could apply
    assert finishing_flags_not_applied(results, asked(tflite=("float16",)), convertible=False) == []
    assert finishing_flags_not_applied(results, asked(tta=("identity", "flip"))) == []
    assert finishing_flags_not_applied(results, asked(tta=("identity",) + CROP_VIEWS, calibrate="temperature")) == \
        ["--tta crops (it finished with flip=horizontal)", "--calibrate temperature (it finished with none)"]
    # the referral decision: other classes, or another operating point (read only with positive classes)
    assert finishing_flags_not_applied(results, asked(positive_classes=("square", "circle"), at_specificity=0.5)) == \
        ["--positive-classes square,circle (it finished with circle)", "--at-specificity 0.5 (it finished with 0.95)"]
    assert finishing_flags_not_applied(results, asked(at_specificity=0.5)) == [
        "--at-specificity 0.5 (it finished with 0.95)"]
    no_referral = {"clinical": {"class_names": ["circle", "square"]}}
    assert finishing_flags_not_applied(no_referral, asked(positive_classes=("circle",), at_specificity=0.5)) == [
        "--positive-classes circle (it finished with none)"]
    assert finishing_flags_not_applied(no_referral, asked(positive_classes=())) == []
    assert finishing_flags_not_applied({}, asked()) == []  # no report (--synthetic data): no referral to make
    # defaults not given: the run that finished with --at-specificity 0.9 rerun without it, OCT's default classes
    finished = {"clinical": {"referral": {"positive_classes": ["CNV"], "at_specificity": {"target": 0.9}}}}
    assert finishing_flags_not_applied(finished, SimpleNamespace(
        tta=(), calibrate="none", tflite=(), positive_classes=("CNV", "DME"), at_specificity=0.95,
        explicit_flags=frozenset())) == []


def test_balanced_class_weights():
    assert images_job.balanced_class_weights([30, 10]) == pytest.approx([40 / 60, 40 / 20])


def test_a_finished_run_asked_again_with_other_flags_refuses_or_notes_them(tmp_path, capsys):
    from pipeline.roles import run
    from pipeline.settings import Settings
    from pipeline.run_output import flags_not_trained_with
    data, model_dir = make_shapes_folder(str(tmp_path / "data"), per_class=6), str(tmp_path / "model")
    common = ["--max-steps", "2", "--batch-size", "4", "--validation-fraction", "0", "--bootstrap-resamples", "10",
              "--precision", "fp32"]
    results = run(TASK, args_for(data, model_dir, "--model", "small_cnn", *common))
    written = (tmp_path / "model" / "results.json").read_bytes()
    with pytest.raises(FlagError, match="--model keras_scratch: the checkpoints in .* were trained with --model "
                                        "small_cnn; resume"):  # finished or not: the record names its model
        run(TASK, args_for(data, model_dir, "--model", "keras_scratch", *common))
    assert (tmp_path / "model" / "results.json").read_bytes() == written
    capsys.readouterr()
    run(TASK, args_for(data, model_dir, "--model", "small_cnn", *common))
    assert "note:" not in capsys.readouterr().out  # the same flags: nothing to note
    run(TASK, args_for(data, model_dir, "--model", "small_cnn", *common, "--tta", "flip", "--tflite", "float32"))
    assert "note: --tta flip=horizontal (it finished with none); --tflite float32 (it finished with none): these act " \
           "when a run finishes, and this one finished with other values; run again with --eval-only to apply them" \
           in capsys.readouterr().out
    assert (tmp_path / "model" / "results.json").read_bytes() == written
    with pytest.raises(FlagError, match="--model keras_scratch: the checkpoints in .* were trained with --model "
                                        "small_cnn; resume"):  # it was "does not fit ... (the same --image-size, say)"
        run(TASK, args_for(data, model_dir, "--model", "keras_scratch", *common, "--max-steps", "4"))
    # a record of an earlier version names no model: the finished run's results note it
    assert flags_not_trained_with(results, Settings.from_args(args_for(data, model_dir, "--model", "vgg16"))) == \
        ["--model small_cnn (not vgg16)"]

    def asked(precision, requested):
        return Settings.from_args(args_for(data, model_dir, "--model", "small_cnn")).replace(
            precision=precision, precision_requested=requested)
    assert flags_not_trained_with(results, asked("bf16", "bf16")) == ["--precision fp32 (not bf16)"]
    assert flags_not_trained_with(results, asked("bf16", "auto")) == []  # picked by the machine, not asked
    # the backbone's layers: every one of small_cnn's, trained from random weights
    assert results["weights"] == "none" and results["trainable_layers"] == "all"
    run(TASK, args_for(data, model_dir, "--model", "small_cnn", *common, "--trainable-layers", "2"))
    assert "note: it was trained with every backbone layer trainable (--weights none, no --trainable-layers) (not " \
           "--trainable-layers 2)" in capsys.readouterr().out
    run(TASK, args_for(data, model_dir, "--model", "small_cnn", *common, "--label-smoothing", "0.1", "--augment", "flip"))
    assert "note: it was trained with --augment none (not flip=horizontal), --label-smoothing 0 (not 0.1): these " \
           "results are not of this command's flags" in capsys.readouterr().out
    run(TASK, args_for(data, model_dir, "--model", "small_cnn", *common, "--lr-schedule", "cosine"))  # the rate's too
    assert "note: it was trained with --lr-schedule constant (not cosine): these results" in capsys.readouterr().out
    assert (tmp_path / "model" / "results.json").read_bytes() == written
    # a run trained in bf16: --eval-only would refuse --tflite, so the note does not send you there
    bf16 = common[:-2] + ["--precision", "bf16"]
    run(TASK, args_for(data, str(tmp_path / "bf16"), "--model", "small_cnn", *bf16))
    capsys.readouterr()
    run(TASK, args_for(data, str(tmp_path / "bf16"), "--model", "small_cnn", *common[:-2], "--tflite", "float32"))
    printed = capsys.readouterr().out
    assert "note: --tflite float32: the model its --eval-only would convert trained in bf16, whose bfloat16 " \
           "tensors TFLite cannot hold, so no --eval-only converts it" in printed
    assert "--eval-only to apply" not in printed


@pytest.mark.parametrize("flags, weights, trainable", [
    ([], "none", None),  # small_resnet, trained from scratch: every layer
    (["--model", "mobilenet_v2"], "imagenet", 0),  # pretrained: the head first
    (["--model", "mobilenet_v2", "--weights", "none"], "none", None),
    (["--model", "mobilenet_v2", "--trainable-layers", "20"], "imagenet", 20),
    (["--weights", "/w/no_top.h5"], "/w/no_top.h5", 0),
])
def test_the_backbone_defaults_reach_the_settings_resolved_once(tmp_path, flags, weights, trainable):
    """prepare_data's recipe values are what the run's settings take (pipeline.run_setup): the record and
    results.json read the layers from them, not the flags' None."""
    data = make_shapes_folder(str(tmp_path / "data"), per_class=5)
    for source in (["--synthetic"], ["--data-dir", data]):
        args = build_parser(TASK).parse_args([*source, "--model-dir", str(tmp_path / "m"), *flags])
        prepared = images_job.prepare_data(args, 4)
        assert prepared.recipe_values == {"weights": weights, "trainable_layers": trainable}
        assert prepared.report["weights"] == weights
        assert prepared.report["trainable_layers"] == ("all" if trainable is None else trainable)


def test_flags_the_data_would_leave_unused_or_cannot_serve_are_refused(tmp_path):
    data, model_dir = make_shapes_folder(str(tmp_path / "data"), per_class=5), str(tmp_path / "model")
    held = make_shapes_folder(str(tmp_path / "held"), per_class=2, seed=1)
    images_job._DATASETS.clear()
    with pytest.raises(FlagError, match=r"--validation-dir .*absent is not a folder; pass a folder of class folders"):
        args = args_for(data, model_dir, "--validation-dir", str(tmp_path / "absent"))
        images_job.validation_sides(args, images_job.load_dataset(args))
    with pytest.raises(FlagError, match="--validation-dir .* and --validation-fraction 0.3 both choose the "
                                        "validation split; pass one of them"):
        args = args_for(data, model_dir, "--validation-dir", held, "--validation-fraction", "0.3")
        images_job.validation_sides(args, images_job.load_dataset(args))
    args = args_for(data, model_dir, "--validation-dir", held)  # the default fraction, not given: the folder's
    assert len(images_job.validation_sides(args, images_job.load_dataset(args))["validation"][0]) == 6
    shutil.rmtree(os.path.join(held, "square"))  # a class its accuracy would not see: accepted without a word
    with pytest.raises(InputDataError, match=r"--validation-dir .*held has no folder for class\(es\) 'square', "
                                             "which training has: .* pass --validation-fraction instead"):
        images_job.validation_sides(args, images_job.load_dataset(args))
    one_class = os.path.join(held, "circle")  # a class's folder, not a folder of them: the fix names this flag
    with pytest.raises(InputDataError, match=re.escape(f"pass --validation-dir {held}, whose every folder is a class")):
        images_job.validation_sides(args_for(data, model_dir, "--validation-dir", one_class),
                                    images_job.load_dataset(args))
    presplit = str(tmp_path / "presplit")
    make_shapes_folder(os.path.join(presplit, "train"), per_class=4)
    make_shapes_folder(os.path.join(presplit, "test"), per_class=2, seed=2)
    with pytest.raises(FlagError, match="--test-fraction 0.3: .* holds train and test folders, and its test folder "
                                        "is the test split; drop --test-fraction"):
        images_job.load_dataset(args_for(presplit, model_dir, "--test-fraction", "0.3"))
    assert len(images_job.load_dataset(args_for(presplit, model_dir)).splits["test"][0]) == 6


@pytest.mark.parametrize("name", ["val", "Validation"])
def test_a_val_folder_beside_train_and_test_is_named_when_it_is_not_read(tmp_path, caplog, name):
    data, model_dir = str(tmp_path / "data"), str(tmp_path / "model")
    for side, per_class in (("train", 4), ("test", 2), (name, 2)):
        make_shapes_folder(os.path.join(data, side), per_class=per_class, seed=len(side))
    unread = os.path.join(data, name)
    images_job._DATASETS.clear()
    caplog.set_level("WARNING", logger=images_job.log.name)
    images_job.load_dataset(args_for(data, model_dir))
    assert [r.getMessage() for r in caplog.records] == [
        f"{unread} is not read: this job trains on train/ and tests on test/; pass --validation-dir {unread} to "
        "validate on its images"]
    caplog.clear()
    images_job._DATASETS.clear()
    os.symlink(data, str(tmp_path / "link"))
    for spelling in (unread + "/", os.path.join(str(tmp_path / "link"), name)):  # named, by another spelling
        args = args_for(data, model_dir, "--validation-dir", spelling)
        assert len(images_job.validation_sides(args, images_job.load_dataset(args))["validation"][0]) == 6
        images_job._DATASETS.clear()
    assert not caplog.records
    assert storage.same_folder("gs://b/data/val/", "gs://b/data/val")
    assert not storage.same_folder("gs://b/data/val", "gs://b/data/validation")


def test_the_planned_steps_of_a_resume_at_another_batch_count_the_earlier_steps_at_theirs():
    from models.learning_rate import ScheduledRate
    # 30 steps of 64, then resumed at 8 a step to 20 more: the run ends at global step 50, not 1,920+160 / 8.
    resumed = ScheduledRate(1e-3, 30 * 64 + 20 * 8, images_per_step=8, start_step=30, images_at_start=30 * 64)
    assert images_job.planned_steps(resumed) == 50
    assert images_job.planned_steps(ScheduledRate(1e-3, 100 * 32, images_per_step=32)) == 100
    assert images_job.planned_steps(1e-3) is None  # a fixed rate (a network built outside a run)


def test_your_own_train_and_test_holding_one_group_are_named_in_a_warning(tmp_path, caplog):
    """--group-by keeps a patient on one side of a split made here; your own folders are used as they are,
    and a patient in both trained on what it was tested on without a word."""
    from PIL import Image
    data = tmp_path / "data"
    for side, patients in (("train", ("p01", "p02", "p03")), ("test", ("p03", "p04"))):
        for label in ("a", "b"):
            for patient in patients:
                (data / side / label).mkdir(parents=True, exist_ok=True)
                Image.new("L", (8, 8), color=int(patient[1:]) * 20 + (5 if label == "b" else 0) +
                          (100 if side == "test" else 0)).save(data / side / label / f"{patient}-1.png")
    images_job._DATASETS.clear()
    images_job.load_dataset(args_for(str(data), str(tmp_path / "model"), "--group-by", r"^(p\d+)-"))
    assert "1 --group-by group is in both train/ and test/ (p03): your folders are used as they are" in caplog.text
    caplog.clear()
    images_job._DATASETS.clear()
    images_job.load_dataset(args_for(str(data), str(tmp_path / "other")))  # no groups asked for: none named
    assert "--group-by" not in caplog.text


def test_a_run_that_fails_in_a_folder_of_yours_leaves_it_as_it_was(tmp_path):
    """Its lock file stayed behind: in an empty folder given to --eval-only, in one holding your notes. A folder
    the run made goes (test_bad_inputs), and a model dir's lock stays for its next run."""
    from acquisition.errors import InputDataError
    from pipeline.errors import UsageError
    from pipeline.model_dir import LOCK_FILE
    from pipeline.roles import run
    data = make_shapes_folder(str(tmp_path / "data"), per_class=6)
    empty, notes = tmp_path / "empty", tmp_path / "notes"
    empty.mkdir()
    notes.mkdir()
    (notes / "plan.txt").write_text("mine")
    with pytest.raises(UsageError, match="--eval-only needs a trained model dir"):
        run(TASK, args_for(data, str(empty), "--eval-only"))
    assert os.listdir(empty) == []
    one_class = tmp_path / "one-class"
    shutil.copytree(os.path.join(data, "circle"), one_class / "circle")
    with pytest.raises(InputDataError, match="holds 1 class folder"):
        run(TASK, args_for(str(one_class), str(notes)))
    assert os.listdir(notes) == ["plan.txt"] and (notes / "plan.txt").read_text() == "mine"
    (notes / LOCK_FILE).write_text("")  # a run's model dir: its lock is there before, and stays
    with pytest.raises(InputDataError, match="holds 1 class folder"):
        run(TASK, args_for(str(one_class), str(notes)))
    assert sorted(os.listdir(notes)) == sorted([LOCK_FILE, "plan.txt"])


def test_the_header_quotes_a_class_name_with_a_comma_or_a_space_at_an_end():
    from pipeline.run_output import _describe_classes
    assert _describe_classes([" DME", "CNV ", "a, b", "NORMAL"]) == '  classes:       " DME", "CNV ", "a, b", NORMAL\n'


def test_the_header_names_the_network_its_weights_and_the_layers_that_train():
    from pipeline.run_output import _describe_model
    from pipeline.tasks.fashion import TASK as FASHION
    from pipeline.tasks.oct import TASK as OCT

    def line(task, initial_weights=None, start_step=0, **settings):
        return _describe_model(types.SimpleNamespace(
            task=task, settings=types.SimpleNamespace(**{"eval_only": False, **settings}),
            initial_weights=initial_weights, steps=types.SimpleNamespace(start_step=start_step)))
    assert line(TASK, model="vgg16", weights="imagenet", trainable_layers=0) == \
        "  model:         vgg16, ImageNet weights, the head only trainable\n"
    assert line(TASK, model="small_cnn", weights="none", trainable_layers=None) == \
        "  model:         small_cnn, random weights (--weights none), every layer trainable\n"
    assert line(OCT, weights="/w/vgg.h5", trainable_layers=1) == \
        ("  model:         VGG16 with a new head, the weights of /w/vgg.h5, the head and the backbone's last layer "
         "trainable\n")
    assert "every weight from --init-from's checkpoint" in line(TASK, "the head run", model="small_cnn", weights="none",
                                                                 trainable_layers=3)
    assert line(FASHION, batch_size=32) == ""  # one network, no --weights
    # resumed (an --init-from run's --weights resolve to none) or evaluated: not 'random weights'
    for resumed in ({"start_step": 40}, {"eval_only": True}):
        assert "small_cnn, the weights of its checkpoint, every layer" in line(
            TASK, model="small_cnn", weights="none", trainable_layers=None, init_from="/runs/head", **resumed)


def test_pictures_in_formats_no_job_reads_and_images_beside_the_class_folders_are_named_not_left_out_silently(
        tmp_path, caplog):
    data, model_dir = make_shapes_folder(str(tmp_path / "data"), per_class=5), str(tmp_path / "model")
    junk = class_folders.scan_class_folders(data).ignored_files  # (the folder's own notes and .DS_Store)
    for name in ("circle/a.webp", "circle/b.WEBP", "square/deep/c.tiff", "circle/readme.md"):
        os.makedirs(os.path.dirname(os.path.join(data, name)), exist_ok=True)
        (tmp_path / "data" / name).write_bytes(b"RIFF....WEBP")
    for name in ("loose-2.png", "loose-1.png"):
        shutil.copy(os.path.join(data, "circle", os.listdir(os.path.join(data, "circle"))[0]), os.path.join(data, name))
    images_job._DATASETS.clear()
    caplog.set_level("WARNING", logger=images_job.log.name)
    dataset = images_job.load_dataset(args_for(data, model_dir))
    assert [r.getMessage() for r in caplog.records] == [
        "3 files in the class folders are pictures in formats this job cannot read (1 .tiff, 2 .webp) and are left "
        "out; convert them to PNG or JPEG to train on them",
        f"2 image(s) lie beside the class folders, in none of them, and are left out (the first: "
        f"{os.path.join(data, 'loose-1.png')}); move each into its class's folder to train on it"]
    assert dataset.report["unread_image_files"] == {".tiff": 1, ".webp": 2}
    assert dataset.report["loose_image_files"] == 2 and dataset.report["ignored_files"] == junk + 4
    assert sum(len(files) for files, _ in dataset.splits.values()) == 15
    held = make_shapes_folder(str(tmp_path / "held"), per_class=2, seed=1)
    (tmp_path / "held" / "circle" / "c.avif").write_bytes(b"....ftypavif")
    caplog.clear()
    args = args_for(data, model_dir, "--validation-dir", held)
    images_job.validation_sides(args, images_job.load_dataset(args))
    assert f"1 files in the class folders of --validation-dir {held} are pictures in formats this job cannot read " \
           "(1 .avif) and are left out; convert them to PNG or JPEG to validate on them" in caplog.messages


def test_the_summary_s_per_class_columns_line_up_under_class_names_in_wide_characters():
    from pipeline.run_output import per_class_lines
    figures = {"precision": 0.5, "recall": 0.25, "support": 4}
    rows = per_class_lines({"per_class": {"猫": figures, "dog": figures, "犬犬犬": figures},
                            "clinical": {"class_names": ["猫", "dog", "犬犬犬"]}})
    assert [row.split()[0] for row in rows] == ["猫", "dog", "犬犬犬"]
    columns = [sum(2 if ord(c) > 0x2e80 else 1 for c in row[:row.index(" precision")]) for row in rows]
    assert len(set(columns)) == 1, rows  # each character of 猫 and 犬 takes two columns of a terminal
    one = per_class_lines({"per_class": {"dog": {**figures, "support": 1}}})
    assert one[0].endswith("(1 image)") and rows[0].endswith("(4 images)")  # '(1 images)' before
