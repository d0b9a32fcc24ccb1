"""Training progress counted in images: --epochs across resumes with another global batch."""
import json
import types

import pytest

from pipeline import training_record as progress
from pipeline.errors import FlagError, UsageError

FP32 = types.SimpleNamespace(precision="fp32", deterministic=False, seed=None)  # how a run trains


def test_a_fresh_run_trains_the_epochs_in_whole_steps():
    plan = progress.plan([], 0, 32, 800, epochs=2)
    assert (plan.max_steps, plan.images_at_start, plan.target_images, plan.assumed) == (50, 0, 1600, False)
    assert progress.plan([], 0, 64, 800, epochs=1).max_steps == 13  # the last batch goes past the epoch
    assert progress.plan([], 0, 64, 10, epochs=0.001).max_steps == 1


def test_a_resume_with_a_larger_batch_trains_the_images_that_remain():
    # 23 steps of 32 images were trained (736 of 1,600), then the batch doubles.
    segments = [progress.Segment(0, 0, 32)]
    plan = progress.plan(segments, 23, 64, 800, epochs=2)
    assert plan.images_at_start == 736
    assert plan.max_steps == 23 + 14  # 864 images left: 13.5 steps of 64
    assert plan.images_at_end == 736 + 14 * 64


def test_max_steps_stays_exact_whatever_the_images():
    plan = progress.plan([progress.Segment(0, 0, 32)], 23, 64, 800, max_steps=25)
    assert (plan.max_steps, plan.images_at_start, plan.images_at_end, plan.target_images) == (25, 736, 864, None)


def test_a_run_counting_more_images_than_float64_holds_exactly_is_refused():
    assert progress.plan([], 0, 2 ** 20, 800, max_steps=2 ** 33).images_at_end == progress.MAX_IMAGES
    with pytest.raises(FlagError, match=r"^--max-steps 8589934593 plans 9.01e\+15 training images"):
        progress.plan([], 0, 2 ** 20, 800, max_steps=2 ** 33 + 1)
    with pytest.raises(FlagError, match=r"^--epochs 1e\+300 plans 8e\+302 training images.*smaller --epochs$"):
        progress.plan([], 0, 32, 800, epochs=1e300)
    # Resumed: the images trained before count.
    with pytest.raises(FlagError, match="--max-steps 8589934592 plans"):
        progress.plan([progress.Segment(0, 0, 2 ** 20)], 1, 2 ** 20 + 1, 800, max_steps=2 ** 33)


def test_a_run_whose_epochs_are_done_plans_no_step():
    plan = progress.plan([progress.Segment(0, 0, 32), progress.Segment(23, 736, 64)], 37, 16, 800, epochs=2)
    assert plan.max_steps == 37 and plan.images_at_start == 1632


def test_the_images_of_a_step_come_from_the_run_that_wrote_it(tmp_path):
    model_dir, data = str(tmp_path), progress.describe_data(False, 800)
    first = progress.plan([], 0, 32, 800, epochs=2)
    started_from = {"model_dir": "/runs/head", "checkpoint": "/runs/head/best/model.ckpt-9", "step": 9,
                    "chosen": "its best on validation", "averaged": False}
    progress.record_start(model_dir, "fashion", progress.Record([]), first, data, FP32, started_from)
    record = progress.read(model_dir, "fashion")
    second = progress.plan(record.segments, 30, 64, 800, epochs=2)  # resumed at step 30: 960 images
    progress.record_start(model_dir, "fashion", record, second, data,
                          types.SimpleNamespace(precision="bf16", deterministic=True, seed=3))
    record = progress.read(model_dir, "fashion")
    assert progress.images_at(record.segments, 20, 16) == (640, False)
    assert progress.images_at(record.segments, 35, 16) == (960 + 5 * 64, False)
    # The checkpoint at 35 was damaged and set aside: a third run resumes from 30 with another batch, and
    # the second run's record, whose later checkpoints are gone, is replaced.
    third = progress.plan(record.segments, 30, 16, 800, epochs=2)
    progress.record_start(model_dir, "fashion", record, third, data, FP32)
    saved = json.loads((tmp_path / progress.PROGRESS_FILE).read_text())
    assert saved == {"task": "fashion", "data": {"synthetic": False, "train_examples": 800, "validation_fraction": None},
                     "runs": [{"start_step": 0, "images_at_start": 0, "global_batch": 32, "max_steps": 50,
                               "precision": "fp32", "deterministic": False, "seed": None, "image_size": None,
                               "model": None, "ema": None, "trainable_layers": None, "init_from": started_from,
                               "recipe": {}, "decode": None},
                              {"start_step": 30, "images_at_start": 960, "global_batch": 16, "max_steps": 70,
                               "precision": "fp32", "deterministic": False, "seed": None, "image_size": None,
                               "model": None, "ema": None, "trainable_layers": None, "init_from": None,
                               "recipe": {}, "decode": None}]}


def test_a_resume_on_other_data_is_refused(tmp_path):
    model_dir = str(tmp_path)
    progress.record_start(model_dir, "fashion", progress.Record([]), progress.plan([], 0, 32, 800, epochs=1),
                          progress.describe_data(False, 800), FP32)
    record = progress.read(model_dir, "fashion")
    progress.check_same_data(record, progress.describe_data(False, 800), model_dir)  # the same data: fine
    with pytest.raises(UsageError, match="trained on real data of 800 training images, and this run's is real "
                                         "data of 60,000 training images: .* pass the --data-dir and validation "
                                         r"split \(--validation-fraction, --validation-dir\) it was trained with, "
                                         "or pass another --model-dir"):
        progress.check_same_data(record, progress.describe_data(False, 60000), model_dir)
    with pytest.raises(FlagError, match="this run's is generated data of 800 .*; drop --synthetic, or pass"):
        progress.check_same_data(record, progress.describe_data(True, 800), model_dir)  # a flag: exit 2
    # a listed image damaged since, left out by --on-bad-image skip: named, not the flags alone
    with pytest.raises(UsageError, match=r"real data of 799 training images: .*; 1 file\(s\) are skipped as bad "
                                         r"\(/d/a/1.png, ...\): restore any that were readable when it trained, or "
                                         "pass the --data-dir"):
        progress.check_same_data(record, progress.describe_data(False, 799), model_dir, skipped=["/d/a/1.png"])
    # more training images than it trained on (another validation split): a skipped file is no cause
    with pytest.raises(UsageError, match=r"real data of 801 training images: .*; pass the --data-dir") as refused:
        progress.check_same_data(record, progress.describe_data(False, 801), model_dir, skipped=["/d/a/1.png"])
    assert "skipped" not in str(refused.value) and not isinstance(refused.value, FlagError)  # the data: exit 1
    # images a run of the model dir could not decode, which no step trained on: as many fewer go on, more do not
    undecodable = ["/d/a/1.png", "/d/b/2.png"]
    progress.check_same_data(record, progress.describe_data(False, 798), model_dir, undecodable=undecodable)
    for refused_count in (797, 801):
        with pytest.raises(UsageError, match=f"real data of {refused_count} training images"):
            progress.check_same_data(record, progress.describe_data(False, refused_count), model_dir,
                                     undecodable=undecodable)
    with pytest.raises(FlagError, match="this run's is generated data of 799"):
        progress.check_same_data(record, progress.describe_data(True, 799), model_dir, undecodable=undecodable)
    # an evaluation counts no epochs: another validation split (or test data beside it) is its business
    progress.check_same_data(record, progress.describe_data(False, 720), model_dir, training=False)
    with pytest.raises(UsageError, match="this run's is generated data of 800"):
        progress.check_same_data(record, progress.describe_data(True, 800), model_dir, training=False)


def test_a_resume_with_another_validation_fraction_is_a_flag_to_change(tmp_path):
    model_dir = str(tmp_path)
    progress.record_start(model_dir, "fashion", progress.Record([]), progress.plan([], 0, 32, 718, epochs=1),
                          progress.describe_data(False, 718, 0.1), FP32)
    record = progress.read(model_dir, "fashion")
    progress.check_same_data(record, progress.describe_data(False, 718, 0.1), model_dir)
    with pytest.raises(FlagError, match=r"^--validation-fraction 0.2: the model dir .* was trained with "
                                        r"--validation-fraction 0.1 \(718 training images, 640 now\): .*; resume with "
                                        "--validation-fraction 0.1, or pass another --model-dir$"):
        progress.check_same_data(record, progress.describe_data(False, 640, 0.2), model_dir)
    with pytest.raises(FlagError, match=r"^no validation share held out of its training images \(--validation-fraction 0, or a "
                                        r"--validation-dir\): .* resume with "
                                        "--validation-fraction 0.1,"):
        progress.check_same_data(record, progress.describe_data(False, 800, None), model_dir)
    progress.check_same_data(record, progress.describe_data(False, 640, 0.2), model_dir, training=False)
    # a record of an earlier version kept no fraction: its images alone are compared, as data (exit 1)
    old = progress.Record(record.segments, {"synthetic": False, "train_examples": 718})
    progress.check_same_data(old, progress.describe_data(False, 718, 0.1), model_dir)
    with pytest.raises(UsageError, match="trained on real data of 718 training images") as refused:
        progress.check_same_data(old, progress.describe_data(False, 640, 0.2), model_dir)
    assert not isinstance(refused.value, FlagError)


def test_a_conversion_of_a_bf16_policy_export_is_refused_before_anything_runs():
    bf16, fp32 = progress.Segment(0, 0, 32, 10, "bf16"), progress.Segment(10, 320, 32, 20, "fp32")
    newest = "--tflite: the export in /m was trained with --precision bf16, whose bfloat16 tensors TFLite cannot hold"
    with pytest.raises(FlagError, match=newest):
        progress.check_convertible([bf16], 10, ("float32",), "/m", eval_only=True)
    progress.check_convertible([bf16], 10, (), "/m", eval_only=True)  # no conversion asked
    progress.check_convertible([bf16, fp32], 20, ("int8",), "/m", eval_only=True)  # the newest run's export: float32
    progress.check_convertible([progress.Segment(0, 0, 32)], 10, ("int8",), "/m", True)  # an earlier version's
    # a resume in fp32 trains and exports with its own graph...
    progress.check_convertible([bf16], 10, ("float32",), "/m", eval_only=False)
    # ... but the best model validation kept converts, and its step says which run trained it
    kept = ("--tflite: the best model validation kept in /m (step 8) was trained with --precision bf16, whose "
            "bfloat16 tensors TFLite cannot hold; drop --tflite, or pass another --model-dir")
    for eval_only, start in ((False, 10), (True, 20)):
        with pytest.raises(FlagError, match=kept.replace("(", r"\(").replace(")", r"\)")):
            progress.check_convertible([bf16, fp32][:start // 10], start, ("int8",), "/m", eval_only, best_step=8)
    progress.check_convertible([bf16, fp32], 20, ("int8",), "/m", eval_only=True, best_step=16)  # fp32's best
    progress.check_convertible([bf16, fp32], 20, ("int8",), "/m", eval_only=False, best_step=12)


def test_a_resume_with_another_model_is_refused_naming_the_one_it_trained():
    small = progress.Segment(0, 0, 32, 10, "fp32", False, None, 32, "small_cnn")
    with pytest.raises(FlagError, match="--model small_resnet: the checkpoints in /m were trained with --model "
                                        "small_cnn; resume \\(or evaluate\\) with --model small_cnn"):
        progress.check_same_model([small], 10, "small_resnet", "/m")
    progress.check_same_model([small], 10, "small_cnn", "/m")
    progress.check_same_model([small], 10, None, "/m")  # a job without --model
    progress.check_same_model([progress.Segment(0, 0, 32)], 10, "small_resnet", "/m")  # an earlier version's


def test_a_resume_with_another_ema_decay_is_refused_naming_the_one_it_averaged_with():
    averaged = progress.Segment(0, 0, 32, 10, "fp32", False, None, None, None, 0.9)
    with pytest.raises(FlagError, match=r"--ema 0.5: the checkpoints in /m averaged their weights with --ema 0.9; "
                                        r"resume \(or evaluate\) with --ema 0.9"):
        progress.check_same_ema_decay([averaged], 10, 0.5, "/m")
    progress.check_same_ema_decay([averaged], 10, 0.9, "/m")
    progress.check_same_ema_decay([averaged], 0, 0.5, "/m")  # a new run: nothing trained before it
    progress.check_same_ema_decay([averaged], 10, None, "/m")  # without --ema: pipeline.ema.check's to refuse
    progress.check_same_ema_decay([progress.Segment(0, 0, 32)], 10, 0.5, "/m")  # an earlier version's: on trust


def test_a_model_dir_without_a_record_counts_its_steps_at_this_batch():
    assert progress.images_at([], 0, 64) == (0, False)
    assert progress.images_at([], 10, 64) == (640, True)


def test_another_jobs_model_dir_is_refused(tmp_path):
    progress.record_start(str(tmp_path), "fashion", progress.Record([]), progress.plan([], 0, 32, 800, epochs=1),
                          progress.describe_data(False, 800), FP32)
    with pytest.raises(UsageError, match="holds a run of the fashion job, not oct; pass another --model-dir"):
        progress.read(str(tmp_path), "oct")


def test_another_jobs_results_are_refused_where_no_record_was_kept(tmp_path):
    (tmp_path / "results.json").write_text('{"task": "fashion", "global_step": 3}')
    with pytest.raises(UsageError, match="holds a run of the fashion job, not oct"):
        progress.read(str(tmp_path), "oct")
    assert progress.read(str(tmp_path), "fashion") == progress.Record([])


def test_a_damaged_record_is_one_line_naming_it(tmp_path):
    (tmp_path / progress.PROGRESS_FILE).write_text('{"task": "fash')
    with pytest.raises(UsageError, match=f"cannot read .*{progress.PROGRESS_FILE}"):
        progress.read(str(tmp_path), "fashion")


def test_a_deterministic_resume_of_steps_trained_otherwise_is_refused():
    def segment(start, deterministic, seed):
        return progress.Segment(start, start * 32, 32, None, "fp32", deterministic, seed)
    plain, seeded, seeded_3 = segment(0, False, None), segment(0, True, 0), segment(20, True, 3)
    with pytest.raises(FlagError, match="--deterministic: steps 0-20 in /m were trained without it, so this run "
                                        "could not be reproduced bit for bit; resume without --deterministic"):
        progress.check_reproducible([plain], 20, True, 0, "/m")
    with pytest.raises(FlagError, match="--seed 3: steps 0-20 in /m were trained with --deterministic and seed "
                                        "0; resume with --seed 0"):
        progress.check_reproducible([seeded], 20, True, 3, "/m")
    with pytest.raises(FlagError, match="steps 20-40 in /m were trained with --deterministic and seed 3"):
        progress.check_reproducible([seeded, seeded_3], 40, True, 0, "/m")
    progress.check_reproducible([seeded], 20, True, 0, "/m")  # the same seed goes on
    progress.check_reproducible([plain], 20, False, None, "/m")  # without --deterministic, nothing is claimed
    progress.check_reproducible([plain], 0, True, 0, "/m")  # from step 0: nothing trained yet
    # a run killed before its first checkpoint recorded a segment at the step this one resumes from: not history
    progress.check_reproducible([seeded, segment(20, False, None)], 20, True, 0, "/m")
    progress.check_reproducible([progress.Segment(0, 0, 32)], 20, True, 0, "/m")  # an earlier version's: on trust
    # the precision is part of what a bit-for-bit run repeats
    with pytest.raises(FlagError, match="--precision bf16: steps 0-20 in /m were trained with --deterministic in "
                                        "fp32, so this run could not be reproduced bit for bit; resume with "
                                        "--precision fp32"):
        progress.check_reproducible([seeded], 20, True, 0, "/m", "bf16")
    in_bf16 = progress.Segment(0, 0, 32, 100, "bf16", True, 0)
    # --tflite makes auto pick fp32, and the advice to resume in bf16 was then refused for --tflite
    with pytest.raises(FlagError, match="^--tflite: steps 0-20 in /m were trained with --deterministic in bf16, "
                                        "whose bfloat16 tensors TFLite cannot hold, .*; drop --tflite, or pass "
                                        "another --model-dir$"):
        progress.check_reproducible([in_bf16], 20, True, 0, "/m", "fp32", ("int8",))
    with pytest.raises(FlagError, match="^--precision fp32: .*; resume with --precision bf16"):
        progress.check_reproducible([in_bf16], 20, True, 0, "/m", "fp32")
    progress.check_reproducible([seeded], 20, True, 0, "/m", "fp32")
    progress.check_reproducible([plain], 20, False, None, "/m", "bf16")  # without --deterministic: any precision


def test_a_resume_at_another_image_size_is_refused():
    def segment(start, image_size):
        return progress.Segment(start, start * 32, 32, None, "fp32", False, None, image_size)
    with pytest.raises(FlagError, match=r"--image-size 48: the checkpoints in /m were trained at --image-size 32; "
                                        r"resume \(or evaluate\) with --image-size 32"):
        progress.check_same_image_size([segment(0, 32), segment(20, 48)], 20, 48, "/m")
    progress.check_same_image_size([segment(0, 32)], 20, 32, "/m")  # the same size goes on
    progress.check_same_image_size([segment(0, 32)], 0, 48, "/m")  # from step 0: nothing trained yet
    progress.check_same_image_size([segment(0, None)], 20, 48, "/m")  # an earlier version's: on trust
    progress.check_same_image_size([segment(0, None)], 20, None, "/m")  # a job without --image-size


def test_a_resume_with_other_trainable_layers_is_refused_naming_the_ones_it_trained():
    head_only = progress.Segment(0, 0, 32, 10, "fp32", False, None, 32, "mobilenet_v2", None, 0)
    with pytest.raises(FlagError, match=r"^--trainable-layers 20 cannot resume the checkpoints in /m, trained with "
                                        r"the head only \(--trainable-layers 0, the default with pretrained "
                                        r"--weights\); resume with the same, or train these layers in another "
                                        r"--model-dir$"):
        progress.check_same_trainable_layers([head_only], 10, 20, "/m")
    four = progress.Segment(0, 0, 32, 10, "fp32", False, None, 32, "vgg16", None, 4)  # the OCT job's default
    with pytest.raises(FlagError, match=r"^the head only .* cannot resume the checkpoints in /m, trained with "
                                        r"--trainable-layers 4; "):
        progress.check_same_trainable_layers([four], 10, 0, "/m")
    every = progress.Segment(0, 0, 32, 10, "fp32", False, None, 32, "small_cnn", None, "all")
    with pytest.raises(FlagError, match=r"^--trainable-layers 2 cannot resume .* trained with every backbone layer "
                                        r"trainable \(--weights none, no --trainable-layers\)"):
        progress.check_same_trainable_layers([head_only, every][1:], 10, 2, "/m")
    progress.check_same_trainable_layers([head_only], 10, 0, "/m")
    progress.check_same_trainable_layers([every], 10, "all", "/m")
    progress.check_same_trainable_layers([head_only], 0, 20, "/m")  # a new run: nothing trained before it
    progress.check_same_trainable_layers([head_only], 10, None, "/m")  # a job without the flag
    progress.check_same_trainable_layers([progress.Segment(0, 0, 32)], 10, 20, "/m")  # an earlier version's


def test_the_record_keeps_the_layers_the_images_job_resolves_from_its_weights():
    from pipeline.flags import build_parser
    from pipeline.settings import Settings
    from pipeline.tasks.images import TASK
    from pipeline.tasks.images_job import backbone_settings
    parse = build_parser(TASK).parse_args

    def recorded(*flags):
        args = parse(["--data-dir", "d", *flags])
        return progress.trainable_layers_of(Settings.from_args(args).replace(**backbone_settings(args)))
    assert recorded() == "all"  # small_resnet, from scratch
    assert recorded("--model", "mobilenet_v2") == 0  # pretrained: the head first
    assert recorded("--model", "mobilenet_v2", "--weights", "none") == "all"
    assert recorded("--model", "mobilenet_v2", "--trainable-layers", "20") == 20
    assert progress.trainable_layers_of(FP32) is None  # the Fashion job has no backbone


def recipe(**flags):
    settings = dict(augment=(), label_smoothing=0.0, mixup=0.0, cutmix=0.0, mix_switch_prob=0.5, class_weight="none",
                    learning_rate=1e-3, reference_batch_size=512, lr_scaling="linear", lr_schedule="constant",
                    warm_up_epochs=0.0)
    return progress.recipe_of(types.SimpleNamespace(**{**settings, **flags}))


def test_a_resume_under_another_recipe_is_refused_and_another_rate_named():
    first = progress.Segment(0, 0, 32, recipe=recipe(augment=(("flip", "horizontal"), ("rotate", 15.0))))
    assert first.recipe["--augment"] == "flip=horizontal,rotate=15" and "--mix-switch-prob" not in first.recipe
    same = recipe(augment=(("rotate", 15.0), ("flip", "horizontal")))  # another order: the same transforms
    assert progress.check_same_recipe([first], 10, same, "/m") is None
    with pytest.raises(FlagError, match=r"^--augment none --class-weight balanced: the steps to 10 in /m trained "
                                        "with --augment flip=horizontal,rotate=15 --class-weight none; resume with "
                                        "those"):
        progress.check_same_recipe([first], 10, recipe(class_weight="balanced"), "/m")
    rate = {**same, **recipe(lr_schedule="cosine", learning_rate=0.01)}
    rate["--augment"] = same["--augment"]
    assert progress.check_same_recipe([first], 10, rate, "/m") == (
        "--learning-rate 0.01 --lr-schedule cosine: the steps to 10 trained with --learning-rate 0.001 --lr-schedule "
        "constant; the rate follows this run's flags from here (training_progress.json keeps each run's)")
    # The rate is scaled from the reference batch: another one is another rate (it changed silently).
    assert progress.check_same_recipe([first], 10, {**same, "--reference-batch-size": "320"}, "/m") == (
        "--reference-batch-size 320: the steps to 10 trained with --reference-batch-size 512; the rate follows "
        "this run's flags from here (training_progress.json keeps each run's)")
    older = progress.Segment(0, 0, 32, recipe={k: v for k, v in first.recipe.items() if k != "--reference-batch-size"})
    assert progress.check_same_recipe([older], 10, {**same, "--reference-batch-size": "320"}, "/m") is None
    assert "--reference-batch-size" not in recipe(lr_scaling="none")  # a rate not scaled: it changes nothing
    both = recipe(mixup=0.2, cutmix=1.0)
    assert both["--mix-switch-prob"] == "0.5"  # the switch counts when both mix
    assert progress.check_same_recipe([progress.Segment(0, 0, 32)], 10, both, "/m") is None  # an earlier version's
    assert progress.check_same_recipe([first], 0, both, "/m") is None  # nothing trained yet


def test_a_run_left_only_its_report_to_write_refuses_another_rate_batch_or_precision():
    last = progress.Segment(0, 0, 32, precision="fp32", recipe=recipe())
    trained = ([last], 10)
    progress.check_report_flags(*trained, "fp32", 32, recipe(), "/m")  # the same flags: no word
    progress.check_report_flags([progress.Segment(0, 0, 32)], 10, "bf16", 32, recipe(learning_rate=0.5), "/m")  # kept none
    with pytest.raises(FlagError, match=r"^/m trained to its final step 10, and only its report is left to write: its "
                                        r"last steps trained with --learning-rate 0.001 and --lr-schedule constant, not "
                                        r"this run's; run with those"):
        progress.check_report_flags(*trained, "fp32", 32, recipe(learning_rate=0.5, lr_schedule="cosine"), "/m")
    with pytest.raises(FlagError, match=r"with --precision fp32 and a global batch of 32 \(--batch-size x replicas\) "
                                        r"and --warm-up-epochs 0, not"):
        progress.check_report_flags(*trained, "bf16", 64, recipe(warm_up_epochs=1.0), "/m")


def test_a_resume_that_moves_a_decaying_schedule_s_end_is_named():
    # Stopped at step 100 of 200 (batch 32), resumed with another --epochs: cosine's rate jumped, with no word.
    first = progress.Segment(0, 0, 32, max_steps=200)
    longer = progress.plan([first], 100, 32, 1000, epochs=12.8)  # 12,800 images: step 400
    assert progress.schedule_moved([first], 100, longer, "cosine") == (
        "--lr-schedule cosine: the run before planned 6,400 training images and this one 12,800; the rate follows "
        "the new length from step 100 (it jumps where the two schedules differ)")
    assert progress.schedule_moved([first], 100, longer, "constant") is None  # no decay to move
    assert progress.schedule_moved([first], 0, longer, "cosine") is None  # nothing trained yet
    same = progress.plan([first], 100, 64, 1000, epochs=6.4)  # the same length at another batch
    assert progress.schedule_moved([first], 100, same, "cosine") is None
    rounded = progress.plan([first], 100, 48, 1000, epochs=6.4)  # 3,200 left in steps of 48: 6,416 at its end
    assert rounded.images_at_end == 6416 and progress.schedule_moved([first], 100, rounded, "cosine") is None


def test_a_resume_at_another_global_batch_is_named():
    # The shipped sample's quick start resumed with --epochs 25 went on at batch 512 (its recipe off), unsaid.
    first = progress.Segment(0, 0, 32, max_steps=200)
    assert progress.batch_changed([first], 100, 512) == (
        "the steps to 100 trained at a global batch of 32 and this run trains at 512 (--batch-size x replicas): the "
        "images so far are counted at theirs, the steps from here at this one")
    assert progress.batch_changed([first], 100, 32) is None
    assert progress.batch_changed([first], 0, 512) is None


def test_a_resume_in_another_precision_is_named():
    """Without --deterministic (which refuses it) a bf16 run resumed in fp32 said nothing, and results.json
    named fp32 alone."""
    first = progress.Segment(0, 0, 32, max_steps=200, precision="bf16")
    assert progress.precision_changed([first], 30, "fp32") == (
        "the steps to 30 trained in bf16 and this run trains in fp32: results.json's precision is the last run's; "
        "training_progress.json keeps each run's")
    assert progress.precision_changed([first], 30, "bf16") is None
    assert progress.precision_changed([first], 0, "fp32") is None  # nothing trained yet
    assert progress.precision_changed([progress.Segment(0, 0, 32)], 30, "fp32") is None  # an earlier version's


def test_a_resume_or_evaluation_with_another_decode_is_refused_naming_the_one_it_trained_with():
    reduced = progress.Segment(0, 0, 32, 10, "fp32", decode="reduced")
    with pytest.raises(FlagError, match=r"--decode full: the checkpoints in /m were trained with --decode reduced; "
                                        r"resume \(or evaluate\) with --decode reduced"):
        progress.check_same_decode([reduced], 10, "full", "/m")
    progress.check_same_decode([reduced], 10, "reduced", "/m")
    progress.check_same_decode([reduced], 10, None, "/m")  # a job without --decode
    progress.check_same_decode([progress.Segment(0, 0, 32)], 10, "full", "/m")  # an earlier version's


def test_a_resume_with_another_optimizer_or_weight_decay_is_refused_and_older_steps_count_as_adam_without_decay():
    first = progress.Segment(0, 0, 32, recipe=recipe(optimizer="sgd", weight_decay=5e-4))
    assert (first.recipe["--optimizer"], first.recipe["--weight-decay"]) == ("sgd", "0.0005")
    assert progress.check_same_recipe([first], 10, recipe(optimizer="sgd", weight_decay=5e-4), "/m") is None
    with pytest.raises(FlagError, match=r"^--optimizer adam --weight-decay 0: the steps to 10 in /m trained with "
                                        "--optimizer sgd --weight-decay 0.0005; resume with those"):
        progress.check_same_recipe([first], 10, recipe(optimizer="adam", weight_decay=0.0), "/m")
    # Steps recorded before the two flags were trained by Adam without decay: a checkpoint without SGD's slots.
    earlier = progress.Segment(0, 0, 32, recipe=recipe())
    assert "--optimizer" not in earlier.recipe
    assert progress.check_same_recipe([earlier], 10, recipe(optimizer="adam", weight_decay=0.0), "/m") is None
    with pytest.raises(FlagError, match=r"^--optimizer sgd: the steps to 10 in /m trained with --optimizer adam;"):
        progress.check_same_recipe([earlier], 10, recipe(optimizer="sgd", weight_decay=0.0), "/m")


@pytest.mark.parametrize("job", ["fashion", "oct", "images"])
def test_sgd_without_a_rate_of_its_own_is_refused_and_with_one_is_taken(job):
    from pipeline.flags import build_parser
    from pipeline.settings import Settings
    from pipeline.tasks.registry import TASKS
    parser = build_parser(TASKS[job])
    with pytest.raises(FlagError, match="^--optimizer sgd needs a rate of its own: the job's default --learning-rate"):
        Settings.from_args(parser.parse_args(["--optimizer", "sgd"]))
    settings = Settings.from_args(parser.parse_args(["--optimizer", "sgd", "--learning-rate", "0.1",
                                                     "--weight-decay", "5e-4"]))
    assert (settings.optimizer, settings.learning_rate, settings.weight_decay) == ("sgd", 0.1, 5e-4)
    assert Settings.from_args(parser.parse_args([])).optimizer == "adam"
    assert Settings.from_args(parser.parse_args(["--optimizer", "sgd", "--eval-only"])).eval_only  # builds none


def test_a_weight_decay_that_zeroes_or_flips_the_kernels_at_the_run_s_rate_is_refused(tmp_path):
    # 1 - rate x W <= 0 trained to chance without a word (W 2000 at the rate 0.001: each step multiplied by -1).
    from pipeline.flags import build_parser
    from pipeline.roles import run
    from pipeline.tasks.fashion import TASK
    model_dir = tmp_path / "m"
    argv = ["--synthetic", "--max-steps", "1", "--batch-size", "512", "--model-dir", str(model_dir)]
    with pytest.raises(FlagError, match=r"^--weight-decay 2000 at this run's rate of 0.001 multiplies the kernels by "
                                        r"1 - 0.001 x 2000 = -1 a step, .*below 1000$"):
        run(TASK, build_parser(TASK).parse_args(argv + ["--weight-decay", "2000"]))
    assert not model_dir.exists()
    with pytest.raises(FlagError, match=r"^--weight-decay 1000 at this run's rate of 0.002 "):  # 2 replicas: 2x
        run(TASK, build_parser(TASK).parse_args(argv + ["--weight-decay", "1000", "--cpu-replicas", "2"]))
