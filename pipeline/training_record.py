"""How far a model dir's training has come, counted in images: --epochs means images, so a
run resumed with another global batch (another --batch-size, more replicas) trains the
images that remain, and the learning-rate schedule goes on where it stood.

The record is `training_progress.json` beside the checkpoints: the job that trains there,
and for each run the global step it started from, the images trained by then and its
global batch. A run writes its entry before its first step, so the images behind any
checkpoint follow exactly, whatever killed a run: the checkpoint at step s was written
by the last run that started at or before s (a run always resumes from the newest
checkpoint), which trained (s - start step) x its global batch images after its start.
"""
import dataclasses
import json
import logging
import math
from typing import Optional, Union

from acquisition import storage
from acquisition.files import write_json_atomically
from pipeline import results as results_lib
from pipeline.errors import FlagError, UsageError

log = logging.getLogger(__name__)
PROGRESS_FILE = "training_progress.json"
MAX_IMAGES = 2 ** 53  # the images a run plans, exact in the learning-rate schedule's float64


@dataclasses.dataclass
class Segment:
    """One run's part of training: from `start_step`, having trained `images_at_start`, at `global_batch`,
    to `max_steps`, in `precision`, with or without --deterministic and its `seed`, at `image_size`, of
    `model`, averaging its weights with --ema's decay `ema`, with `trainable_layers` of its backbone trainable
    (see trainable_layers_of; the last eight None in records of earlier versions; the size, the model and the
    layers None too for a job without --image-size, --model or --trainable-layers), under its `recipe`
    (recipe_of), decoding its JPEGs as --decode says (`decode`, the OCT job's). A new run started from another
    run's weights keeps their `init_from` (pipeline.initial_weights.InitialWeights.as_record)."""
    start_step: int
    images_at_start: int
    global_batch: int
    max_steps: Optional[int] = None
    precision: Optional[str] = None
    deterministic: Optional[bool] = None
    seed: Optional[int] = None
    image_size: Optional[int] = None
    model: Optional[str] = None
    ema: Optional[float] = None  # --ema's decay; None without it (or in records of earlier versions)
    trainable_layers: Optional[Union[int, str]] = None  # the backbone's last N layers, or 'all'
    init_from: Optional[dict] = None  # --init-from's checkpoint, in the segment of step 0
    recipe: Optional[dict] = None  # what training does to the weights, by flag (recipe_of); None in earlier records
    decode: Optional[str] = None  # the OCT job's --decode; None for other jobs (and in earlier records)

    def images_at(self, step):
        return self.images_at_start + (step - self.start_step) * self.global_batch


@dataclasses.dataclass
class Plan:
    """Where this run starts and ends, in steps and images."""
    start_step: int
    max_steps: int
    images_at_start: int
    global_batch: int
    target_images: Optional[int]  # epochs x training images; None with --max-steps
    assumed: bool  # the images at start were not on record (an earlier version's run) but assumed

    @property
    def images_at_end(self):
        return self.images_at_start + (self.max_steps - self.start_step) * self.global_batch


@dataclasses.dataclass
class Record:
    """A model dir's training record: each run's segment (oldest first) and the data trained on."""
    segments: list
    data: Optional[dict] = None  # describe_data's, of the data its epochs count


def read(model_dir, task_name):
    """Returns the model dir's Record (no segments when there is none).

    Raises UsageError when the model dir holds another job's run (by its record, or by the
    results.json of a run that kept none): its checkpoints cannot be this job's.
    """
    path = storage.join(model_dir, PROGRESS_FILE)
    try:
        saved = json.loads(storage.read_text(path))
        owner, record = saved["task"], Record([Segment(**s) for s in saved["runs"]], saved.get("data"))
    except FileNotFoundError:
        owner, record = _results_task(model_dir), Record([])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise UsageError(f"cannot read {path} ({getattr(e, 'strerror', None) or e}); it records the images "
                         "trained so far: restore it, or pass another --model-dir") from None
    if owner is not None and owner != task_name:
        raise UsageError(f"the model dir {model_dir} holds a run of the {owner} job, not {task_name}; pass "
                         f"another --model-dir (or resume it with the {owner} job)")
    return record


def final_step(model_dir):
    """Returns the global step the newest run recorded in `model_dir` trains to, or None (no record,
    an unreadable one, or one of an earlier version, which kept no final step)."""
    return newest_run(model_dir).get("max_steps")


def newest_run(model_dir):
    """Returns the newest run's segment (a dict of Segment's fields) in `model_dir`'s record, read without
    checking whose it is; {} where there is none that reads."""
    try:
        newest = json.loads(storage.read_text(storage.join(model_dir, PROGRESS_FILE)))["runs"][-1]
    except Exception:  # noqa: BLE001 - read for advice and limits only: a bucket's errors are TensorFlow's own
        return {}
    return newest if isinstance(newest, dict) else {}


def describe_data(synthetic, train_examples, validation_fraction=None):
    """Returns the record's description of a run's training data: generated or real, its number of images,
    and the --validation-fraction held out of it (None when none was, or a --validation-dir was read)."""
    return {"synthetic": bool(synthetic), "train_examples": int(train_examples),
            "validation_fraction": float(validation_fraction) if validation_fraction else None}


def check_same_data(record, data, model_dir, training=True, skipped=(), undecodable=()):
    """Raises UsageError (FlagError for --synthetic or another --validation-fraction) when `data`
    (describe_data's) is not the data the model dir's epochs were counted on: generated instead of real
    data, another share held out for validation, or another number of training images (the shipped
    sample against the full dataset, say). Without `training` (--eval-only) only the kind of data must
    match: an evaluation counts no epochs. `skipped`, the files --on-bad-image skip leaves out now, are
    named as a cause when there are fewer training images. Up to len(`undecodable`) fewer are the training
    images a run of the model dir could not decode (see pipeline.undecodable.left_out_of_training): said in
    one line. Records of earlier versions, which kept no validation fraction, are compared by
    their images alone."""
    then = record.data
    if then is None or not record.segments or all(then[key] == value for key, value in data.items() if key in then):
        return
    fewer = then["train_examples"] - data["train_examples"]
    if 0 < fewer <= len(undecodable) and all(then[key] == value for key, value in data.items()
                                             if key in then and key != "train_examples"):
        log.warning("training on %d images, %d fewer than this model dir's run counted its epochs on: %s TensorFlow "
                    "could not decode left out", data["train_examples"], fewer, "the image" if fewer == 1 else "images")
        return
    if not training and then["synthetic"] == data["synthetic"]:
        return
    def words(d):
        return f"{'generated' if d['synthetic'] else 'real'} data of {d['train_examples']:,} training images"
    if then["synthetic"] != data["synthetic"]:
        fix = "pass --synthetic" if then["synthetic"] else "drop --synthetic"
    elif "validation_fraction" in then and then["validation_fraction"] != data["validation_fraction"]:
        raise FlagError(f"{_fraction_flag(data)}: the model dir {model_dir} was trained with {_fraction_flag(then)} "
                        f"({then['train_examples']:,} training images, {data['train_examples']:,} now): its epochs "
                        f"and figures would mix two datasets; resume with {_fraction_flag(then)}, or pass another "
                        "--model-dir")
    elif skipped and data["train_examples"] < then["train_examples"]:
        # (`skipped` holds every split's, and files skipped when it trained too: a cause, not the cause)
        fix = (f"{len(skipped)} file(s) are skipped as bad ({skipped[0]}, ...): restore any that were readable when "
               "it trained, or pass the --data-dir and validation split (--validation-fraction, --validation-dir) it "
               "was trained with")
    else:
        fix = "pass the --data-dir and validation split (--validation-fraction, --validation-dir) it was trained with"
    # --synthetic against the record is a flag to change (exit 2); another count of images, the data itself
    error = FlagError if then["synthetic"] != data["synthetic"] else UsageError
    raise error(f"the model dir {model_dir} was trained on {words(then)}, and this run's is "
                f"{words(data)}: its epochs and figures would mix two datasets; {fix}, or pass another "
                "--model-dir")


def _fraction_flag(data):
    """Returns the validation flag `data` (describe_data's) was held out with, in words."""
    fraction = data["validation_fraction"]
    return f"--validation-fraction {fraction:g}" if fraction else \
        "no validation share held out of its training images (--validation-fraction 0, or a --validation-dir)"


def recorded_job(model_dir):
    """Returns the name of the job whose run `model_dir` holds, as its record (or, without one, its results.json)
    says; None where neither says."""
    try:
        return json.loads(storage.read_text(storage.join(model_dir, PROGRESS_FILE)))["task"]
    except (OSError, ValueError, KeyError, TypeError):
        return _results_task(model_dir)


def _results_task(model_dir):
    try:
        return results_lib.read_results(model_dir).get("task")
    except (OSError, ValueError, AttributeError):
        return None


def trained_before(segments, step):
    """Returns the segments that trained steps before global `step` (later ones' checkpoints are gone)."""
    return [s for s in segments if s.start_step < step]


def planned_end(segments, step):
    """Returns the max_steps the run that trained up to global `step` planned, or None with no record of it."""
    earlier = trained_before(segments, step)
    return earlier[-1].max_steps if earlier else None


def images_at(segments, step, global_batch):
    """Returns (images trained at global `step`, whether that was assumed): from the last
    segment that started at or before `step`, or, with none on record, `step` x `global_batch`."""
    for segment in reversed(segments):
        if segment.start_step <= step:
            return segment.images_at(step), False
    return step * global_batch, step > 0


def plan(segments, start_step, global_batch, num_train_examples, epochs=None, max_steps=None):
    """Returns the Plan of a run starting at `start_step` with `global_batch`: to `max_steps`
    exactly when given, or else to the first step at which `epochs` x `num_train_examples`
    images have been trained (at least step 1; the start when they already have)."""
    images, assumed = images_at(segments, start_step, global_batch)
    if max_steps is not None:
        _check_countable(images + (max_steps - start_step) * global_batch, "--max-steps", max_steps)
        return Plan(start_step, max_steps, images, global_batch, None, assumed)
    target = round(epochs * num_train_examples)
    _check_countable(target, "--epochs", f"{epochs:g}")
    steps_left = max(0, math.ceil((target - images) / global_batch))
    return Plan(start_step, max(1, start_step + steps_left), images, global_batch, target, assumed)


def _check_countable(images, flag, value):
    """Raises FlagError (exit 2) when `flag` `value` would train more than MAX_IMAGES images."""
    if images > MAX_IMAGES:
        raise FlagError(f"{flag} {value} plans {images:.3g} training images, more than a run counts exactly "
                        f"(2**53, in the learning-rate schedule's float64); pass a smaller {flag}")


def check_report_flags(segments, start_step, precision, global_batch, recipe, model_dir):
    """Raises FlagError (exit 2) when a run that only writes the report of a model dir trained to `start_step`
    (stopped after its last step, before its report) asks for another precision, global batch or rate
    (RATE_FLAGS of `recipe`, recipe_of's) than the last steps trained with: results.json would describe that
    training by this run's flags, though none of its steps ran at them."""
    trained = trained_before(segments, start_step)
    if not trained:
        return
    last, differ = trained[-1], []
    if last.precision and last.precision != precision:
        differ.append(f"--precision {last.precision}")
    if last.global_batch != global_batch:
        differ.append(f"a global batch of {last.global_batch} (--batch-size x replicas)")
    theirs = last.recipe or {}  # (an earlier version's steps kept none)
    differ += [f"{flag} {theirs[flag]}" for flag in map(_flag, RATE_FLAGS)
               if flag in theirs and flag in recipe and theirs[flag] != recipe[flag]]
    if differ:
        raise FlagError(f"{model_dir} trained to its final step {start_step}, and only its report is left to write: "
                        f"its last steps trained with {' and '.join(differ)}, not this run's; run with those to write "
                        "it (or --eval-only to evaluate it with these)")


def check_reproducible(segments, start_step, deterministic, seed, model_dir, precision=None, tflite=()):
    """Raises FlagError (exit 2) when a --deterministic run would resume from steps trained otherwise:
    without --deterministic, with another seed, or in another precision than `precision`. Its results
    would claim a run that no one can reproduce. Steps that an earlier version trained (which kept no
    record of it) are taken on trust. Steps in bf16 with --tflite (whose export TFLite cannot hold, and
    for which --precision auto picks fp32) are refused for --tflite, the flag to drop."""
    if not deterministic or not start_step:
        return
    earlier = trained_before(segments, start_step)
    for segment, end in zip(earlier, [s.start_step for s in earlier[1:]] + [start_step]):
        steps = f"steps {segment.start_step}-{end} in {model_dir}"
        if segment.deterministic is False:
            raise FlagError(f"--deterministic: {steps} were trained without it, so this run could not be "
                            "reproduced bit for bit; resume without --deterministic, or pass another --model-dir")
        if segment.deterministic and segment.seed != seed:
            raise FlagError(f"--seed {seed}: {steps} were trained with --deterministic and seed {segment.seed}; "
                            f"resume with --seed {segment.seed} (or without --deterministic), or pass another "
                            "--model-dir")
        if segment.deterministic and precision and segment.precision not in (None, precision):
            if tflite and segment.precision == "bf16":
                raise FlagError(f"--tflite: {steps} were trained with --deterministic in bf16, whose bfloat16 "
                                "tensors TFLite cannot hold, and a run in another precision could not be reproduced "
                                "bit for bit; drop --tflite, or pass another --model-dir")
            raise FlagError(f"--precision {precision}: {steps} were trained with --deterministic in "
                            f"{segment.precision}, so this run could not be reproduced bit for bit; resume with "
                            f"--precision {segment.precision} (or without --deterministic), or pass another "
                            "--model-dir")


def check_convertible(segments, start_step, tflite, model_dir, eval_only, best_step=None):
    """Raises FlagError (exit 2) when --tflite would convert an export of steps trained under the bf16 Keras
    policy: TFLite has no bfloat16 tensors, and the converter fails only after the training or evaluation,
    in many lines of its own (a run in bf16 with --tflite is refused up front). The export converted is the
    best model's when validation kept one (`best_step`, validation.json's: a resumed run's own graph can
    only replace it), else the newest run's (--eval-only; a training run's own is made by this run's graph)."""
    if not tflite or not _exports_bf16(segments, start_step, eval_only, best_step):
        return
    if best_step is None:
        raise FlagError(f"--tflite: the export in {model_dir} was trained with --precision bf16, whose bfloat16 "
                        "tensors TFLite cannot hold; drop --tflite, or convert a run trained with --precision fp32 "
                        "or bf16-amp")
    raise FlagError(f"--tflite: the best model validation kept in {model_dir} (step {best_step}) was trained with "
                    "--precision bf16, whose bfloat16 tensors TFLite cannot hold; drop --tflite, or pass another "
                    "--model-dir")


def eval_only_cannot_convert(segments, start_step, best_step=None):
    """Returns whether an --eval-only run with --tflite would be refused (check_convertible): the export it
    converts, the best's (`best_step`) or else the newest run's, was trained in bf16."""
    return _exports_bf16(segments, start_step, True, best_step)


def _exports_bf16(segments, start_step, eval_only, best_step):
    """Returns whether the export check_convertible would convert was trained under the bf16 Keras policy."""
    trained = trained_before(segments, start_step)
    if best_step is not None:
        exported = [s for s in trained if s.start_step < best_step][-1:]
    else:
        exported = trained[-1:] if eval_only else []
    return bool(exported) and exported[0].precision == "bf16"


# The flags that decide what training does to the weights beyond the graph (which --model, --image-size and
# --trainable-layers decide). results.json describes a run by one value of each of RECIPE_FLAGS; the rate's
# (RATE_FLAGS) may change on a resume, which then applies the rate its flags give (and reports this run's).
RECIPE_FLAGS = ("augment", "label_smoothing", "mixup", "cutmix", "mix_switch_prob", "class_weight", "optimizer",
                "weight_decay")
RATE_FLAGS = ("learning_rate", "reference_batch_size", "lr_scaling", "lr_schedule", "warm_up_epochs")


def recipe_of(settings):
    """Returns {'--augment': 'flip=horizontal,rotate=15', '--lr-schedule': 'cosine', ...}: each of RECIPE_FLAGS
    and RATE_FLAGS that `settings` has, as the command line gives it."""
    def text(value):
        if isinstance(value, float):
            return f"{value:g}"
        if isinstance(value, (list, tuple)):  # --augment's (name, value) pairs, in any order the same
            return ",".join(f"{name}={text(arg)}" for name, arg in sorted(value)) or "none"
        return str(value)
    acting = {"mix_switch_prob": bool(getattr(settings, "mixup", 0) and getattr(settings, "cutmix", 0)),
              "reference_batch_size": getattr(settings, "lr_scaling", "linear") != "none"}  # (else they change nothing)
    return {_flag(dest): text(getattr(settings, dest)) for dest in RECIPE_FLAGS + RATE_FLAGS
            if hasattr(settings, dest) and acting.get(dest, True)}


def _flag(dest):
    """Returns the command-line flag of the settings' `dest` ('--lr-schedule' for 'lr_schedule')."""
    return f"--{dest.replace('_', '-')}"


def recipe_not_trained_with(segments, start_step, recipe):
    """Returns ['--augment flip=horizontal (not none)', ...]: each of RECIPE_FLAGS and RATE_FLAGS whose value in
    `recipe` (recipe_of's) is not the one the steps before `start_step` last trained with ([] with none on
    record)."""
    theirs = _recipe_trained_before(segments, start_step) or {}
    return [f"{flag} {theirs[flag]} (not {recipe[flag]})" for flag in map(_flag, RECIPE_FLAGS + RATE_FLAGS)
            if flag in recipe and flag in theirs and theirs[flag] != recipe[flag]]


def _recipe_trained_before(segments, start_step):
    """Returns the recipe (recipe_of's) the steps before `start_step` last trained with, or None: none on
    record (no steps, or an earlier version's)."""
    earlier = [s for s in trained_before(segments, start_step) if s.recipe is not None]
    return {**RECORDED_SINCE, **earlier[-1].recipe} if earlier and start_step else None


# Recipe flags recorded since a later version, with the value every run before it trained with.
RECORDED_SINCE = {"--optimizer": "adam", "--weight-decay": "0"}


def check_same_recipe(segments, start_step, recipe, model_dir):
    """Raises FlagError (exit 2) when the steps before `start_step` trained under another value of one of
    RECIPE_FLAGS than `recipe` (recipe_of's) gives, naming them: results.json would describe the whole run by
    this one. Returns one line naming the RATE_FLAGS that changed, or None. Steps of an earlier version (no
    recipe on record) are taken on trust."""
    theirs = _recipe_trained_before(segments, start_step)
    if theirs is None:
        return None
    differ = [flag for flag in recipe if flag in theirs and theirs[flag] != recipe[flag]]
    refused = [flag for flag in differ if flag in {_flag(dest) for dest in RECIPE_FLAGS}]

    def values(recipe_, flags):
        return " ".join(f"{flag} {recipe_[flag]}" for flag in flags)
    if refused:
        raise FlagError(f"{values(recipe, refused)}: the steps to {start_step} in {model_dir} trained with "
                        f"{values(theirs, refused)}; resume with {'that' if len(refused) == 1 else 'those'} (its "
                        f"results describe one recipe), or pass another --model-dir (--init-from {model_dir} starts "
                        "a new run from its weights)")
    if differ:
        return (f"{values(recipe, differ)}: the steps to {start_step} trained with {values(theirs, differ)}; the "
                "rate follows this run's flags from here (training_progress.json keeps each run's)")
    return None


def batch_changed(segments, start_step, global_batch):
    """Returns one line when a resume at `start_step` trains at another global batch than the steps before it
    (another --batch-size or replica count, or the shipped sample's recipe turned off by a flag); else None."""
    earlier = trained_before(segments, start_step)
    if not earlier or not start_step or earlier[-1].global_batch == global_batch:
        return None
    return (f"the steps to {start_step} trained at a global batch of {earlier[-1].global_batch} and this run trains "
            f"at {global_batch} (--batch-size x replicas): the images so far are counted at theirs, the steps from "
            "here at this one")


def precision_changed(segments, start_step, precision):
    """Returns one line when a resume at `start_step` trains in another precision than the steps before it
    (a --deterministic run refuses it: check_reproducible); else None. Records of earlier versions kept none."""
    earlier = trained_before(segments, start_step)
    if not earlier or not start_step or earlier[-1].precision in (None, precision):
        return None
    return (f"the steps to {start_step} trained in {earlier[-1].precision} and this run trains in {precision}: "
            f"results.json's precision is the last run's; {PROGRESS_FILE} keeps each run's")


def schedule_moved(segments, start_step, plan_, lr_schedule):
    """Returns one line when a resume at `start_step` moves the end of a --lr-schedule that decays (not
    'constant') to another number of images than the run before it planned (another --epochs or --max-steps):
    from here the rate follows the new length. None otherwise."""
    earlier = [s for s in trained_before(segments, start_step) if s.max_steps is not None]
    if lr_schedule == "constant" or not earlier or not start_step:
        return None
    planned = earlier[-1].images_at(earlier[-1].max_steps)
    if abs(planned - plan_.images_at_end) < max(earlier[-1].global_batch, plan_.global_batch):
        return None  # the same length, rounded to another batch's steps
    return (f"--lr-schedule {lr_schedule}: the run before planned {planned:,} training images and this one "
            f"{plan_.images_at_end:,}; the rate follows the new length from step {start_step} (it jumps where the "
            "two schedules differ)")


def value_before(segments, start_step, field, value):
    """Returns the first value of the segment field `field` that steps before `start_step` trained with other
    than `value`; None when they all match, when `value` is None (nothing to compare) and for steps of an
    earlier version (nothing on record: taken on trust)."""
    if value is None or not start_step:
        return None
    for segment in trained_before(segments, start_step):
        then = getattr(segment, field)
        if then not in (None, value):
            return then
    return None


def check_same_model(segments, start_step, model, model_dir):
    """Raises FlagError (exit 2) when steps before `start_step` trained another --model than `model`: its
    checkpoint does not fit (or, worse, would fit) the network these flags build."""
    then = value_before(segments, start_step, "model", model)
    if then is not None:
        raise FlagError(f"--model {model}: the checkpoints in {model_dir} were trained with --model {then}; resume "
                        f"(or evaluate) with --model {then}, or pass another --model-dir")


def check_same_image_size(segments, start_step, image_size, model_dir):
    """Raises FlagError (exit 2) when steps before `start_step` were trained at another --image-size than
    `image_size`: a model that pools globally takes any size, so its weights would go on at another
    resolution without a word."""
    then = value_before(segments, start_step, "image_size", image_size)
    if then is not None:
        raise FlagError(f"--image-size {image_size}: the checkpoints in {model_dir} were trained at --image-size "
                        f"{then}; resume (or evaluate) with --image-size {then}, or pass another --model-dir")


def check_same_decode(segments, start_step, decode, model_dir):
    """Raises FlagError (exit 2) when steps before `start_step` decoded their JPEGs otherwise than --decode
    `decode` (the OCT job's): the resumed steps, the test figures and the export would see other pixels than
    the weights learned from, without a word."""
    then = value_before(segments, start_step, "decode", decode)
    if then is not None:
        raise FlagError(f"--decode {decode}: the checkpoints in {model_dir} were trained with --decode {then}; "
                        f"resume (or evaluate) with --decode {then}, or pass another --model-dir")


def trainable_layers_of(settings):
    """Returns the backbone layers `settings` train, as the record keeps them: --trainable-layers' N, 'all'
    when it is None (the images job's default with --weights none, once resolved), or None for a job
    without the flag."""
    return layers_on_record(settings.trainable_layers) if hasattr(settings, "trainable_layers") else None


def layers_on_record(trainable_layers):
    """Returns --trainable-layers' resolved value as records keep it: N, or 'all' for None (every layer)."""
    return "all" if trainable_layers is None else trainable_layers


def check_same_trainable_layers(segments, start_step, trainable_layers, model_dir):
    """Raises FlagError (exit 2) when steps before `start_step` trained another number of the backbone's
    layers than `trainable_layers` (trainable_layers_of's): the checkpoint holds no optimizer state for a
    layer unfrozen now, and a layer frozen now would stop learning mid-run without a word."""
    then = value_before(segments, start_step, "trainable_layers", trainable_layers)
    if then is not None:
        raise FlagError(f"{describe_trainable_layers(trainable_layers)} cannot resume the checkpoints in "
                        f"{model_dir}, trained with {describe_trainable_layers(then)}; resume with the same, or "
                        "train these layers in another --model-dir")


def describe_trainable_layers(trainable_layers):
    """Returns the flags that train `trainable_layers` (trainable_layers_of's), in words: the images job's
    defaults (all, or the head only) name the --weights that pick them."""
    if trainable_layers == "all":
        return "every backbone layer trainable (--weights none, no --trainable-layers)"
    if trainable_layers == 0:
        return "the head only (--trainable-layers 0, the default with pretrained --weights)"
    return f"--trainable-layers {trainable_layers}"


def check_same_ema_decay(segments, start_step, decay, model_dir):
    """Raises FlagError (exit 2) when steps before `start_step` averaged their weights with another --ema
    decay than `decay`: results.json (or --eval-only's summary) would give this decay to an average made with
    another. (Whether there is an average at all is pipeline.ema.check's, from the checkpoint itself.)"""
    then = value_before(segments, start_step, "ema", decay or None)
    if then is not None:
        raise FlagError(f"--ema {decay:g}: the checkpoints in {model_dir} averaged their weights with --ema "
                        f"{then:g}; resume (or evaluate) with --ema {then:g}, or pass another --model-dir")


def record_start(model_dir, task_name, record, plan_, data, settings, init_from=None):
    """Writes this run's segment to the model dir's record, before its first step; returns the path.
    `settings` says how it trains: its precision, --deterministic and seed, its --image-size, --model, --ema and
    --trainable-layers; `init_from` (a dict, or None) the weights a new run started from."""
    kept = trained_before(record.segments, plan_.start_step)
    kept.append(Segment(plan_.start_step, plan_.images_at_start, plan_.global_batch, plan_.max_steps,
                        settings.precision, bool(settings.deterministic), settings.seed,
                        getattr(settings, "image_size", None), getattr(settings, "model", None),
                        getattr(settings, "ema", None) or None, trainable_layers_of(settings), init_from,
                        recipe_of(settings), getattr(settings, "decode", None)))
    return write_json_atomically(storage.join(model_dir, PROGRESS_FILE),
                                 {"task": task_name, "data": data, "runs": [dataclasses.asdict(s) for s in kept]})
