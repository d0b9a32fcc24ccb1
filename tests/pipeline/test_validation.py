"""Validation during training: the split, the cadence, the best model kept, early stopping, and a
mirrored evaluation that counts every example once."""
import collections
import functools
import glob
import json
import os
import random
import re
import shutil

import pytest
from PIL import Image
import tensorflow as tf

from acquisition import class_folders
from hooks.checkpoint_saver import CadenceTimer, CheckpointCadence
from pipeline.metrics import CROSS_ENTROPY
from pipeline.validation.best import BEST_DIR, BEST_EXPORT_DIR, BestKeeper
from pipeline.validation.cadence import Cadence, Pacing
from pipeline.validation.early_stopping import EarlyStopping
from pipeline.validation.listener import EVAL_NAME, ValidationListener
from pipeline.validation.record import VALIDATION_FILE
from pipeline.batching import batch_sizes_for_replicas
from pipeline.estimator import replica_batched_input_fn
from pipeline.flags import build_parser
from pipeline.roles import run
from serving import TFLITE_DIR
from pipeline.tasks import fashion, images, oct, oct_job
from pipeline.tasks.oct_dataset import PATIENT_PATTERN

OCT_CLASSES = ("CNV", "DME", "DRUSEN", "NORMAL")


def patients(files):
    return {class_folders.group_of(f, PATIENT_PATTERN) for f in files}


def make_oct2017_patients_tree(sample, root, num_patients=4700):
    """An OCT2017 tree at its real size: train/ holds about 4,700 patients of 8 to 28 scans (about
    84,000), every tenth patient in two class folders, named <CLASS>-<patient>-<n>.jpeg and hard-linked
    from the real sample's scans of that class; test/ holds 3 scans a class. Returns (root, train files)."""
    scans = {name: sorted(os.path.join(sample, name, f) for f in os.listdir(os.path.join(sample, name)))
             for name in OCT_CLASSES}
    for split in ("train", "test"):
        for name in OCT_CLASSES:
            os.makedirs(os.path.join(root, split, name))
    for name in OCT_CLASSES:
        for source in scans[name][:3]:
            os.link(source, os.path.join(root, "test", name, os.path.basename(source)))
    rng, files = random.Random(0), []
    for patient in range(num_patients):
        classes = rng.sample(OCT_CLASSES, 2 if patient % 10 == 0 else 1)
        for n in range(rng.randint(8, 28)):
            name = classes[n % len(classes)]
            files.append(os.path.join(root, "train", name, f"{name}-{100000 + patient}-{n}.jpeg"))
            os.link(scans[name][(patient + n) % len(scans[name])], files[-1])
    return root, files


def test_the_oct_jobs_patient_split_at_real_size_keeps_every_patient_on_one_side(oct_sample, tmp_path):
    root, files = make_oct2017_patients_tree(oct_sample, str(tmp_path / "data" / "OCT2017"))
    model_dir = tmp_path / "model"
    model_dir.mkdir()  # as the run loop makes it
    args = build_parser(oct.TASK).parse_args(["--data-dir", str(tmp_path / "data"), "--model-dir", str(model_dir),
                                              "--image-size", "32"])  # the default --validation-fraction
    data = oct_job.prepare_data(args, 32)
    assert not (model_dir / "validation_files.txt").exists()  # written when training's input is first built
    data.train_input_fn()
    held = (model_dir / "validation_files.txt").read_text().splitlines()
    trained = set(files) - set(held)
    assert set(held) < set(files) and len(held) == data.num_validation_examples
    assert data.num_train_examples == len(trained) and sum(data.train_class_counts) == len(trained)
    assert not patients(held) & patients(trained) and len(patients(held) | patients(trained)) == 4700
    labels = {f: os.path.basename(os.path.dirname(f)) for f in files}
    per_class = collections.Counter(labels.values())
    for name, count in collections.Counter(labels[f] for f in held).items():
        assert abs(count / per_class[name] - 0.1) < 0.02  # about the default 0.1 of each class, patients whole


def test_init_from_an_oct_run_that_trained_on_this_run_s_validation_scans_is_refused(oct_sample, tmp_path):
    """Another --validation-fraction draws other patients: the starting weights learned some of them. Checked
    where the starting run trained: its data root (a copy of this one is caught by its bytes)."""
    from pipeline.errors import FlagError
    root, _ = make_oct2017_patients_tree(oct_sample, str(tmp_path / "data" / "OCT2017"), num_patients=60)

    def prepared(model_dir, *flags, data_dir=tmp_path / "data"):
        os.makedirs(model_dir, exist_ok=True)
        args = build_parser(oct.TASK).parse_args(["--data-dir", str(data_dir), "--model-dir", str(model_dir),
                                                  "--image-size", "32", *map(str, flags)])
        return oct_job.prepare_data(args, 32)
    source = tmp_path / "source"
    prepared(source, "--validation-fraction", 0.2).train_input_fn()  # writes its validation_files.txt
    (source / "results.json").write_text(json.dumps({"data_root": os.path.realpath(root)}))

    assert prepared(tmp_path / "same", "--validation-fraction", 0.2, "--init-from", source).num_validation_examples
    with pytest.raises(FlagError, match=re.escape(f"--init-from {source} trained on ")) as refused:
        prepared(tmp_path / "more", "--validation-fraction", 0.4, "--init-from", source)
    assert "hold out what it held out (its --validation-fraction)" in str(refused.value)

    shutil.copytree(tmp_path / "data", tmp_path / "copy")
    with pytest.raises(FlagError, match="validation images"):
        prepared(tmp_path / "copied", "--validation-fraction", 0.4, "--init-from", source, data_dir=tmp_path / "copy")

    # Its data root not on this machine (a model dir copied from a cluster): this run's scans, by name.
    (source / "results.json").write_text(json.dumps({"data_root": str(tmp_path / "gone" / "OCT2017")}))
    with pytest.raises(FlagError, match="validation images"):
        prepared(tmp_path / "moved", "--validation-fraction", 0.4, "--init-from", source)

    (source / "results.json").unlink()  # stopped before its results: where it trained is not known
    assert prepared(tmp_path / "unknown", "--validation-fraction", 0.4, "--init-from", source).num_validation_examples


def test_batches_for_replicas_count_every_example_once():
    for n in range(1, 90):
        for replicas in (2, 3):
            sizes = batch_sizes_for_replicas(n, 16, replicas)
            assert sum(sizes) == n and all(0 < s <= 16 for s in sizes)
            assert n < replicas or len(sizes) % replicas == 0
    dataset = tf.data.Dataset.range(70).batch(16)
    batched = replica_batched_input_fn(lambda input_context=None: dataset.map(lambda x: ({"x": x}, x)), 70, 16, 2)
    seen = [batch[1].numpy().tolist() for batch in batched()]
    assert [len(b) for b in seen] == [16, 16, 16, 16, 5, 1] and sum(seen, []) == list(range(70))


class ScriptedEstimator:
    """Stands in for the Estimator: each evaluation returns the next scripted (accuracy, loss)."""

    def __init__(self, figures):
        self.figures, self.evaluated = list(figures), []

    def evaluate(self, input_fn, checkpoint_path=None, name=None, hooks=None):
        self.evaluated.append(checkpoint_path)
        accuracy, loss = self.figures.pop(0)
        return {"accuracy": accuracy, CROSS_ENTROPY: loss, "global_step": int(checkpoint_path.rsplit("-", 1)[1])}


def fake_checkpoint(model_dir, step):
    for suffix in (".index", ".data-00000-of-00001"):
        with open(os.path.join(model_dir, f"model.ckpt-{step}{suffix}"), "w") as f:
            f.write(str(step))


def listener(model_dir, figures, start_step=0, exports=None, **stops):
    exports = [] if exports is None else exports

    def export(checkpoint):
        path = os.path.join(model_dir, BEST_EXPORT_DIR, str(len(exports)))
        os.makedirs(path)
        exports.append(checkpoint)
        return path
    cadence = Cadence(every_steps=10, every_images=None, images_at=lambda step: step)
    max_steps = stops.pop("max_steps", None)
    return ValidationListener(ScriptedEstimator(figures), None, Pacing(cadence, max_steps), model_dir, start_step,
                              BestKeeper(model_dir, export), EarlyStopping(**stops))


def train_to(listener_, model_dir, steps):
    for step in steps:
        fake_checkpoint(model_dir, step)
        if listener_.after_save(None, step):
            return step
    return None


def test_a_superseded_best_export_goes_with_its_tflite_conversions(tmp_path):
    """A resumed run's new best removed the old best export but left its .tflite files in export/tflite/."""
    model_dir = str(tmp_path)
    watcher = listener(model_dir, [(0.5, 1.0), (0.7, 0.9), (0.6, 0.8)])
    train_to(watcher, model_dir, [10])
    os.makedirs(os.path.join(model_dir, BEST_EXPORT_DIR, TFLITE_DIR, "0"))  # a finished run's conversions of 0
    os.makedirs(os.path.join(model_dir, BEST_EXPORT_DIR, TFLITE_DIR, "7"))  # of an export an earlier run removed
    train_to(watcher, model_dir, [20])
    assert sorted(os.listdir(os.path.join(model_dir, BEST_EXPORT_DIR))) == ["1", TFLITE_DIR]
    assert os.listdir(os.path.join(model_dir, BEST_EXPORT_DIR, TFLITE_DIR)) == []
    os.makedirs(os.path.join(model_dir, BEST_EXPORT_DIR, TFLITE_DIR, "1"))
    train_to(watcher, model_dir, [30])  # no better: the best's conversions stay
    assert os.listdir(os.path.join(model_dir, BEST_EXPORT_DIR, TFLITE_DIR)) == ["1"]


def test_patience_stops_at_the_expected_evaluation_and_ties_go_to_the_lower_loss(tmp_path):
    model_dir = str(tmp_path)
    figures = [(0.5, 1.0), (0.7, 0.9), (0.7, 0.8), (0.6, 0.7), (0.7, 0.8), (0.9, 0.1)]
    watcher = listener(model_dir, figures, patience=2)
    stopped = train_to(watcher, model_dir, range(5, 100, 5))
    # 30 is the best model (a tie with 20 at a lower loss), but no rise in accuracy: 30 and 40 count.
    assert stopped == 40 and watcher.stopped_because == "patience"
    assert [e["step"] for e in watcher.record["evaluations"]] == [10, 20, 30, 40]  # every 10 steps, from 5s
    assert watcher.record["best"]["step"] == 30
    assert os.listdir(os.path.join(model_dir, BEST_DIR)) == ["model.ckpt-30.index",
                                                                         "model.ckpt-30.data-00000-of-00001"] or \
        sorted(os.listdir(os.path.join(model_dir, BEST_DIR))) == ["model.ckpt-30.data-00000-of-00001",
                                                                             "model.ckpt-30.index"]


def test_a_target_accuracy_stops_at_the_first_evaluation_reaching_it(tmp_path):
    watcher = listener(str(tmp_path), [(0.5, 1.0), (0.81, 0.5), (0.9, 0.4)], stop_at_accuracy=0.8)
    assert train_to(watcher, str(tmp_path), range(10, 40, 10)) == 20 and watcher.stopped_because == "target_accuracy"


class FakeClock:
    """Seconds that pass only when told: training between checkpoints, and each evaluation."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_the_auto_cadence_waits_19_times_an_evaluation_of_training_and_an_exact_one_does_not(tmp_path):
    def evaluated_steps(auto, folder, max_steps=125):
        clock = FakeClock()
        os.makedirs(folder)
        estimator = ScriptedEstimator([(0.5, 1.0)] * 20)
        evaluate = estimator.evaluate

        def slow_evaluate(*args, **kwargs):  # each evaluation takes 2 s
            clock.now += 2.0
            return evaluate(*args, **kwargs)
        estimator.evaluate = slow_evaluate
        cadence = Cadence(every_steps=None, every_images=10, images_at=lambda step: step, auto=auto,
                                     epochs=1.0)
        watcher = ValidationListener(estimator, None, Pacing(cadence, max_steps, clock), folder, 0, BestKeeper(folder))
        for step in range(10, max_steps, 10):  # an epoch (10 images) of training takes 5 s
            clock.now += 5.0
            fake_checkpoint(folder, step)
            watcher.after_save(None, step)
        fake_checkpoint(folder, max_steps)
        watcher.end(None, max_steps)
        return [e["step"] for e in watcher.record["evaluations"]], watcher.seconds, clock.now

    steps, spent, _ = evaluated_steps(True, str(tmp_path / "auto"), max_steps=185)
    # The first at the first epoch; the next at the first checkpoint 19 x 2 s = 38 s of training after it
    # (step 90: 40 s; step 80 had 35 s) with as much left before the final step; that one's at the end, as always.
    assert steps == [10, 90, 185] and spent == 6.0
    # With less than 38 s left after step 90 (12.5 s), the evaluation there is left to the final step's.
    assert evaluated_steps(True, str(tmp_path / "short"), max_steps=115)[0] == [10, 115]
    assert evaluated_steps(False, str(tmp_path / "exact"))[0] == list(range(10, 125, 10)) + [125]


def test_under_the_auto_cadence_a_checkpoint_is_saved_at_an_epochs_end_only_for_an_evaluation(tmp_path):
    """The one-machine saver and the listener share a Pacing: an epoch's end that the auto cadence holds
    back gets no checkpoint (it got one each before), and each that is evaluated gets its own."""
    def run(auto, folder, max_steps=265):
        clock, estimator = FakeClock(), ScriptedEstimator([(0.5, 1.0)] * 40)
        evaluate = estimator.evaluate

        def slow_evaluate(*args, **kwargs):  # each evaluation takes 2 s
            clock.now += 2.0
            return evaluate(*args, **kwargs)
        estimator.evaluate = slow_evaluate
        os.makedirs(folder)
        cadence = Cadence(every_steps=None, every_images=10, images_at=lambda step: step, auto=auto, epochs=1.0)
        pacing = Pacing(cadence, max_steps, clock)
        timer = CadenceTimer(CheckpointCadence(50, due=pacing.checkpoint_due))
        watcher = ValidationListener(estimator, None, pacing, folder, 0, BestKeeper(folder))
        saved = []
        for step in range(1, max_steps):  # a step takes 0.5 s: an epoch (10 steps) 5 s
            clock.now += 0.5
            if timer.should_trigger_for_step(step):
                timer.update_last_triggered_step(step)
                saved.append(step)
                fake_checkpoint(folder, step)
                watcher.after_save(None, step)
        return saved, [e["step"] for e in watcher.record["evaluations"]]

    saved, evaluated = run(True, str(tmp_path / "auto"))
    # The session's first step, the multiples of 50, and the epochs' ends evaluated: 10, then 90 (19 x 2 s
    # after 10's evaluation ended), then 170; not 250, too near the final step's; never 20-80 or 100-160.
    assert evaluated == [10, 90, 170]
    assert saved == [1, 10, 50, 90, 100, 150, 170, 200, 250]
    saved, evaluated = run(False, str(tmp_path / "exact"))
    assert evaluated == list(range(10, 265, 10)) and saved == sorted({1, 50, 100, 150, 200, 250} | set(evaluated))


def test_a_resumed_run_never_replaces_the_best_with_a_worse_model(tmp_path):
    model_dir, exports = str(tmp_path), []
    first = listener(model_dir, [(0.6, 1.0), (0.8, 0.5), (0.7, 0.6)], exports=exports)
    train_to(first, model_dir, [10, 20])
    # Killed (as kill -9 does) midway through keeping a better checkpoint: its copy is half made.
    fake_checkpoint(os.path.join(model_dir, BEST_DIR), 25)
    recorded = json.loads((tmp_path / VALIDATION_FILE).read_text())
    resumed = listener(model_dir, [(0.7, 0.6), (0.85, 0.4)], start_step=20, exports=exports)
    assert resumed.record == recorded
    train_to(resumed, model_dir, [30])  # worse than the recorded best: kept as it was
    assert resumed.record["best"]["step"] == 20 and len(exports) == 2
    assert sorted(glob.glob(os.path.join(model_dir, BEST_DIR, "*"))) == sorted(
        glob.glob(os.path.join(model_dir, BEST_DIR, "model.ckpt-20.*")))
    train_to(resumed, model_dir, [40])
    assert resumed.record["best"]["step"] == 40 and exports[-1].endswith("model.ckpt-40")
    assert os.listdir(os.path.join(model_dir, BEST_EXPORT_DIR)) == ["2"]  # the superseded are gone


def events(folder, tag):
    return {e.step: v.simple_value for path in glob.glob(os.path.join(folder, "events.out.tfevents.*"))
            for e in tf.compat.v1.train.summary_iterator(path) for v in e.summary.value if v.tag == tag}


def make_oct_shaped_folder(sample, root, patients_per_class=12, scans_per_patient=6):
    """Class folders of <CLASS>-<patient>-<n>.jpeg made from the real sample's scans, each with a comment
    of its own name (the same scan twice would be the same image, which the split refuses to put in
    training and test); every fourth patient also has scans in the next class's folder."""
    for c, name in enumerate(OCT_CLASSES):
        os.makedirs(os.path.join(root, name))
    for c, name in enumerate(OCT_CLASSES):
        scans = sorted(os.listdir(os.path.join(sample, name)))
        for p in range(patients_per_class):
            patient = 1000 * (c + 1) + p
            for n in range(scans_per_patient):
                label = (c + 1) % 4 if p % 4 == 0 and n % 2 else c
                with open(os.path.join(sample, name, scans[(p * scans_per_patient + n) % len(scans)]), "rb") as f:
                    scan = f.read()
                file_name = f"{OCT_CLASSES[label]}-{patient}-{n}.jpeg"
                comment = file_name.encode()  # a JPEG COM segment after the start-of-image marker
                with open(os.path.join(root, OCT_CLASSES[label], file_name), "wb") as f:
                    f.write(scan[:2] + b"\xff\xfe" + (len(comment) + 2).to_bytes(2, "big") + comment + scan[2:])
    return root


def test_an_oct_shaped_folder_trains_with_a_patient_split_and_keeps_the_best_export(oct_sample, tmp_path, capsys):
    data = make_oct_shaped_folder(oct_sample, str(tmp_path / "OCT"))
    model_dir = str(tmp_path / "model")
    args = build_parser(images.TASK).parse_args([
        "--data-dir", data, "--model-dir", model_dir, "--image-size", "32", "--batch-size", "8",
        "--cpu-replicas", "2", "--max-steps", "8", "--eval-every-steps", "4", "--group-by", PATIENT_PATTERN,
        "--validation-fraction", "0.2", "--warm-up-steps", "1", "--bootstrap-resamples", "10"])
    results = run(images.TASK, args)
    held = (tmp_path / "model" / "validation_files.txt").read_text().splitlines()
    train = [os.path.join(data, f) for f in (tmp_path / "model" / "split" / "train.txt").read_text().splitlines()]
    test = [os.path.join(data, f) for f in (tmp_path / "model" / "split" / "test.txt").read_text().splitlines()]
    assert len(held) == results["validation_examples"] > 0
    assert results["train_examples"] == len(train) - len(held)
    assert not patients(held) & patients(set(train) - set(held)) and not patients(train) & patients(test)
    steps = [e["step"] for e in results["evaluations"]]
    assert steps == [4, 8] and results["stopped_because"] == "max_steps"
    accuracies = events(os.path.join(model_dir, "eval_" + EVAL_NAME), "accuracy")
    assert sorted(accuracies) == steps
    best = results["best"]
    assert best["validation_accuracy"] == pytest.approx(max(accuracies.values()))
    assert best["step"] == results["eval_step"] and results["export_dir"] == best["export_dir"]
    assert os.path.isfile(os.path.join(best["export_dir"], "saved_model.pb"))
    # The mirrored evaluations counted each validation and test image once (the report checks the test's).
    assert sum(f["support"] for f in results["per_class"].values()) == results["eval_examples"]
    written = (tmp_path / "model" / "results.json").read_bytes()
    again = run(images.TASK, build_parser(images.TASK).parse_args(
        ["--data-dir", data, "--model-dir", model_dir, "--image-size", "32", "--batch-size", "8", "--group-by",
         PATIENT_PATTERN, "--validation-fraction", "0.2", "--bootstrap-resamples", "10", "--eval-only"]))
    assert again["eval_step"] == best["step"] and again["eval_accuracy"] == pytest.approx(results["eval_accuracy"])
    assert (tmp_path / "model" / "results.json").read_bytes() == written  # --eval-only trains and rewrites nothing
    # A run stopped (Ctrl-C, a kill) before its planned end: --eval-only does not call it finished.
    (tmp_path / "model" / "results.json").unlink()
    record = json.loads((tmp_path / "model" / "training_progress.json").read_text())
    record["runs"][-1]["max_steps"] = 16
    (tmp_path / "model" / "training_progress.json").write_text(json.dumps(record))
    shutil.rmtree(best["export_dir"])  # and its best export removed by hand: exported again, not a failure
    capsys.readouterr()
    unfinished = run(images.TASK, build_parser(images.TASK).parse_args(
        ["--data-dir", data, "--model-dir", model_dir, "--image-size", "32", "--batch-size", "8", "--group-by",
         PATIENT_PATTERN, "--validation-fraction", "0.2", "--bootstrap-resamples", "10", "--eval-only"]))
    assert unfinished["stopped_because"] == "unfinished" and unfinished["max_steps"] == 16
    out = capsys.readouterr().out
    assert "images: evaluated at global step 8, where training stopped short of its planned 16" in out, out
    assert "stopped: unfinished" in out and "finished at" not in out
    assert unfinished["export_dir"] != best["export_dir"]
    assert os.path.isfile(os.path.join(unfinished["export_dir"], "saved_model.pb"))


def test_a_target_accuracy_stops_the_fashion_job_on_2_replicas(fashion_data_dir, tmp_path):
    args = build_parser(fashion.TASK).parse_args([
        "--data-dir", fashion_data_dir, "--model-dir", str(tmp_path), "--cpu-replicas", "2", "--batch-size", "32",
        "--learning-rate", "0.003", "--lr-scaling", "none", "--max-steps", "200", "--eval-every-steps", "15",
        "--stop-at-accuracy", "0.7", "--seed", "1", "--warm-up-steps", "2", "--bootstrap-resamples", "10"])
    results = run(fashion.TASK, args)
    accuracies = [e["validation_accuracy"] for e in results["evaluations"]]
    assert results["stopped_because"] == "target_accuracy" and accuracies[-1] >= 0.7
    assert all(accuracy < 0.7 for accuracy in accuracies[:-1])
    assert results["global_step"] == results["evaluations"][-1]["step"] < 200
    assert results["train_examples"] + results["validation_examples"] == 800
    assert results["eval_step"] == results["best"]["step"]
    # --eval-only reports why training stopped, whatever rule its own flags give (none here)
    again = run(fashion.TASK, build_parser(fashion.TASK).parse_args([
        "--data-dir", fashion_data_dir, "--model-dir", str(tmp_path), "--batch-size", "32", "--bootstrap-resamples",
        "10", "--eval-only"]))
    assert again["stopped_because"] == "target_accuracy" and again["eval_step"] == results["eval_step"]


def test_a_validation_dir_replaces_the_fraction_and_is_listed(tmp_path):
    from pipeline.tasks import images_job
    from tests.images_data import make_shapes_folder
    data, held = make_shapes_folder(str(tmp_path / "data"), per_class=5), make_shapes_folder(
        str(tmp_path / "val"), per_class=2, seed=1)  # other images: the same seed draws the same bytes
    args = build_parser(images.TASK).parse_args(["--data-dir", data, "--model-dir", str(tmp_path / "model"),
                                                 "--image-size", "32", "--validation-dir", held])
    dataset = images_job.load_dataset(args)
    sides = images_job.validation_sides(args, dataset)
    assert sides["train"] == dataset.splits["train"]  # nothing of the training split held out
    files, labels = sides["validation"]
    assert files and all(f.startswith(held) for f in files)
    assert [dataset.class_names[label] for label in labels] == [os.path.basename(os.path.dirname(f)) for f in files]
    task_data = images_job.prepare_data(args, 4)
    listing = tmp_path / "model" / "validation_files.txt"
    assert task_data.num_validation_examples == len(files) and not listing.exists()  # not before training
    os.makedirs(tmp_path / "model")  # as training has by then
    task_data.train_input_fn()  # the Estimator builds training's input once every check has passed
    assert listing.read_text().splitlines() == files


@pytest.mark.parametrize("where", ["data dir", "its test folder", "a link to the data dir", "a copy of the test folder"])
def test_a_validation_dir_holding_training_or_test_images_is_refused(tmp_path, where):
    from pipeline.errors import FlagError
    from pipeline.tasks import images_job
    from tests.images_data import make_shapes_folder
    images_job._DATASETS.clear()
    if where == "its test folder":  # DIR/{train,test}/<class>/<image>: validating on test chooses on the report
        data = str(tmp_path / "data")
        make_shapes_folder(os.path.join(data, "train"), per_class=4)
        validation_dir, side = make_shapes_folder(os.path.join(data, "test"), per_class=2, seed=1), "test"
    elif where == "a copy of the test folder":  # the same bytes under other paths
        data = str(tmp_path / "data")
        make_shapes_folder(os.path.join(data, "train"), per_class=4)
        make_shapes_folder(os.path.join(data, "test"), per_class=2, seed=1)
        validation_dir, side = str(tmp_path / "copy"), "test"
        shutil.copytree(os.path.join(data, "test"), validation_dir)
    else:
        data, side = make_shapes_folder(str(tmp_path / "data"), per_class=5), "training"
        validation_dir = data
        if where == "a link to the data dir":
            validation_dir = str(tmp_path / "link")
            os.symlink(data, validation_dir)
    args = build_parser(images.TASK).parse_args(["--data-dir", data, "--model-dir", str(tmp_path / "model"),
                                                 "--image-size", "32", "--validation-dir", validation_dir])
    with pytest.raises(FlagError, match=rf"--validation-dir {validation_dir} holds \d+ of the {side} images .*"
                                        "kept out of training and testing"):
        images_job.validation_sides(args, images_job.load_dataset(args))


def test_the_checkpoint_timer_keeps_to_step_numbers_and_the_cadences_due_steps():
    timer = CadenceTimer(CheckpointCadence(10, due=lambda step, last: step // 7 > last // 7))
    assert timer.should_trigger_for_step(25)  # the first check of a session always saves
    timer.update_last_triggered_step(25)  # resumed at 25: the next multiple of 10 is 30, not 35
    triggered = []
    for step in range(26, 50):
        if timer.should_trigger_for_step(step):
            timer.update_last_triggered_step(step)
            triggered.append(step)
    assert triggered == [28, 30, 35, 40, 42, 49]  # multiples of 10 and of the cadence's 7
    assert not timer.should_trigger_for_step(49) and not timer.should_trigger_for_step(48)


def test_epoch_evaluations_fall_on_the_epochs_ends_after_a_resume_with_another_batch(fashion_data_dir, tmp_path):
    """718 training images: at 32 a step the first epoch ends at step 23, so a run to step 20 evaluates
    only at its end. Resumed at 64 a step (2 replicas), the epochs end at steps 22 (640 + 2 x 64 >= 718)
    and 33 (640 + 13 x 64 >= 1,436): evaluated there, each on a checkpoint of its own step. (The
    Estimator's own saver counted from the resumed step: evaluations at 32 and 40.)"""
    model_dir = str(tmp_path / "model")
    common = ["--data-dir", fashion_data_dir, "--model-dir", model_dir, "--batch-size", "32", "--lr-scaling", "none",
              "--eval-every-epochs", "1", "--warm-up-steps", "1", "--bootstrap-resamples", "10"]
    run(fashion.TASK, build_parser(fashion.TASK).parse_args(common + ["--max-steps", "20"]))
    results = run(fashion.TASK, build_parser(fashion.TASK).parse_args(
        common + ["--cpu-replicas", "2", "--max-steps", "40"]))
    assert results["train_examples"] == 718
    assert [e["step"] for e in results["evaluations"]] == [20, 22, 33, 40]
    saved = {int(name.split("-")[1].split(".")[0]) for name in os.listdir(model_dir) if name.endswith(".index")}
    assert {22, 33, 40} <= saved and not saved & {32}


def test_the_auto_cadence_saves_a_checkpoint_only_for_the_evaluations_it_makes(fashion_data_dir, tmp_path):
    """10 epochs of 23 steps: the auto cadence evaluates the first epoch's end, then holds the next ones
    back (19 x an evaluation's seconds of training, longer than the run) until the final step. Each of
    its evaluations has a checkpoint of its own, and no epoch's end that it held back gets one: the
    saves are the session's first (step 0) and the evaluated steps (they were every epoch's end)."""
    model_dir = str(tmp_path / "model")
    results = run(fashion.TASK, build_parser(fashion.TASK).parse_args(
        ["--data-dir", fashion_data_dir, "--model-dir", model_dir, "--batch-size", "32", "--lr-scaling", "none",
         "--epochs", "10", "--warm-up-steps", "1", "--bootstrap-resamples", "10"]))
    evaluated = [e["step"] for e in results["evaluations"]]
    assert results["global_step"] == 225 and evaluated[0] == 23 and evaluated[-1] == 225
    assert all(step % 23 == 0 for step in evaluated[:-1])
    assert results["checkpoints_saved"] == len(evaluated) + 1


def test_a_run_without_validation_is_evaluated_whatever_the_validation_flags_but_resumed_only_with_its_own(
        fashion_data_dir, tmp_path):
    from pipeline.errors import FlagError
    model_dir = str(tmp_path / "model")

    def args(*extra):
        return build_parser(fashion.TASK).parse_args(["--data-dir", fashion_data_dir, "--model-dir", model_dir,
                                                      "--batch-size", "16", "--bootstrap-resamples", "10", *extra])
    results = run(fashion.TASK, args("--max-steps", "3", "--validation-fraction", "0"))
    assert results["train_examples"] == 800 and results["eval_step"] == 3

    def report_images(folder):  # TensorBoard's events files of the test report at step 3, by size
        return {p: os.path.getsize(p) for p in glob.glob(os.path.join(model_dir, folder, "*.test_report.step3.*"))}
    trained_report = report_images("eval")
    trained_events = sorted(os.listdir(os.path.join(model_dir, "eval")))
    assert trained_report
    again = run(fashion.TASK, args("--eval-only"))  # the default --validation-fraction would train on 718
    assert again["eval_step"] == 3 and again["eval_accuracy"] == pytest.approx(results["eval_accuracy"])
    # its report's images and its evaluation's events beside its report files, the training run's left as they were
    # (the Estimator wrote its loss at step 3, of another batch, beside the training run's)
    assert report_images("eval") == trained_report and report_images(os.path.join("eval_only", "eval"))
    assert sorted(os.listdir(os.path.join(model_dir, "eval"))) == trained_events
    assert any(".test_report." not in n for n in os.listdir(os.path.join(model_dir, "eval_only", "eval")))
    # but a temperature fitted on that default split would be fitted on images the model trained on
    refusal = (r"^--validation-fraction 0.1: the model dir .* was trained with no validation share held out of its "
               r"training images \(--validation-fraction 0, or a --validation-dir\) \(800 training images, \d+ now\): "
               ".* resume with no validation share")
    with pytest.raises(FlagError, match=refusal):
        run(fashion.TASK, args("--eval-only", "--calibrate", "temperature"))
    with pytest.raises(FlagError, match=refusal):
        run(fashion.TASK, args("--max-steps", "6"))


def test_a_resume_validates_on_the_images_its_model_dir_lists_or_is_refused(tmp_path, monkeypatch):
    """A changed --validation-dir, or a file of the data dir replaced, redrew the split silently: the best
    model was then chosen across two validation sets."""
    from pipeline.errors import FlagError, UsageError
    from pipeline.tasks import images_job
    from tests.images_data import make_shapes_folder
    data, held = make_shapes_folder(str(tmp_path / "data"), per_class=6), make_shapes_folder(
        str(tmp_path / "held"), per_class=2, seed=1)
    model_dir = str(tmp_path / "model")

    def args(*extra):
        images_job._DATASETS.clear()
        return build_parser(images.TASK).parse_args([
            "--data-dir", data, "--model-dir", model_dir, "--image-size", "32", "--batch-size", "4",
            "--model", "small_cnn", "--bootstrap-resamples", "10", "--eval-every-steps", "2", *extra])
    run(images.TASK, args("--validation-dir", held, "--max-steps", "2"))
    monkeypatch.chdir(tmp_path)  # the same folder spelled another way: the same split
    results = run(images.TASK, args("--validation-dir", "held", "--max-steps", "4"))
    assert [e["step"] for e in results["evaluations"]] == [2, 4]
    # another folder of the same file names, the first one still there: other images
    other = make_shapes_folder(str(tmp_path / "other"), per_class=2, seed=7)
    with pytest.raises(UsageError, match=r"validation_files.txt lists: \S+other\S+ is not \S*held\S+ \(other bytes"):
        run(images.TASK, args("--validation-dir", other, "--max-steps", "6"))
    shutil.copytree(held, tmp_path / "copy")  # a copy: the same images
    copied = run(images.TASK, args("--validation-dir", str(tmp_path / "copy"), "--max-steps", "4"))
    assert copied["global_step"] == 4
    listed = (tmp_path / "model" / "validation_files.txt").read_text().splitlines()
    os.remove(listed[0])
    with pytest.raises(UsageError, match=r"the validation split is not the one .*validation_files.txt lists \(6 "
                                         r"images then, 5 now: 1 gone, 0 new; \S+ no longer in it\)"):
        run(images.TASK, args("--validation-dir", held, "--max-steps", "6"))
    # an evaluation reads no validation split, unless it fits a temperature on it; it takes the best
    # checkpoint: step 2 or 4, which differed between machines (CI's kept step 2)
    assert run(images.TASK, args("--validation-dir", held, "--eval-only"))["eval_step"] == copied["best"]["step"]
    with pytest.raises(UsageError, match=r"the validation split is not the one .*validation_files.txt lists"):
        run(images.TASK, args("--validation-dir", held, "--eval-only", "--calibrate", "temperature"))
    # a share of the training images instead (the count of training images tells it first)
    with pytest.raises(FlagError, match=r"^--validation-fraction 0.1: .* was trained with no validation share held "
                                        r"out of its training images \(--validation-fraction 0, or a --validation-dir\)"):
        run(images.TASK, args("--max-steps", "6"))


def test_a_resume_without_the_validation_dir_it_validated_on_is_told_to_pass_it(tmp_path):
    """It was 'the validation split is not the one ... lists (2 images then, 0 now ...)', exit 1, as for changed data."""
    from pipeline.errors import FlagError
    from pipeline.validation.split import check_same_split
    listed = tmp_path / "validation_files.txt"
    listed.write_text("".join(f"{tmp_path}/val/{name}\n" for name in ("CNV/a.jpeg", "DME/b.jpeg")))
    with pytest.raises(FlagError, match=rf"^the 2 validation images {listed} lists are none of this run's training "
                                        rf"images: its run validated on --validation-dir {tmp_path}/val; resume with it"):
        check_same_split(str(listed), [])


def test_files_are_told_apart_by_their_bytes_when_every_file_has_the_same_size(tmp_path, monkeypatch):
    """Fixed-size formats (BMP, .gray): a file of the same size but other bytes is no copy, and only the
    files whose first 4 KB are a file's asked about are read whole (every file of its size was)."""
    from pipeline.validation.split import _ContentIndex
    listed = []
    for i in range(50):
        listed.append(tmp_path / f"v{i}.bmp")
        listed[-1].write_bytes(bytes([i]) * 64)
    (tmp_path / "v7-again.bmp").write_bytes(bytes([7]) * 64)
    listed.append(tmp_path / "v7-again.bmp")
    read_whole = []
    digest_of = _ContentIndex.digest_of
    monkeypatch.setattr(_ContentIndex, "digest_of", staticmethod(lambda p: read_whole.append(p) or digest_of(p)))
    index = _ContentIndex([str(p) for p in listed])
    (tmp_path / "copy.bmp").write_bytes(bytes([7]) * 64)
    (tmp_path / "other.bmp").write_bytes(bytes([200]) * 64)
    (tmp_path / "longer.bmp").write_bytes(bytes([7]) * 65)
    assert index.find(str(tmp_path / "copy.bmp")) == str(tmp_path / "v7.bmp")  # the first of the list's two
    assert sorted(read_whole) == sorted(str(tmp_path / n) for n in ("v7.bmp", "v7-again.bmp", "copy.bmp"))
    assert index.find(str(tmp_path / "other.bmp")) is None and index.find(str(tmp_path / "longer.bmp")) is None
    assert index.find(str(tmp_path / "absent.bmp")) is None
    assert len(read_whole) == 3


def test_a_resume_holds_out_the_listed_validation_images_by_path_or_by_name_where_the_data_dir_moved():
    """A trained model dir's list, not a new draw: the split its evaluations were made on, whatever the draw
    does now; a listed image gone (left out since) moves no other."""
    import types
    from pipeline.validation.split import split_off_validation
    files = [f"/new/data/{c}/{i}.png" for c in ("a", "b") for i in range(6)]
    labels = [0] * 6 + [1] * 6
    settings = types.SimpleNamespace(validation_dir=None, validation_fraction=0.25)

    def sides(listed):
        split = split_off_validation(settings, files, labels, None, 0, None, ("a", "b"), listed=listed)
        return split["validation"], split["train"]
    listed = ["/new/data/a/4.png", "/new/data/b/0.png", "/new/data/b/5.png", "/new/data/a/gone.png"]
    (validation, validation_labels), (train, _) = sides(listed)
    assert validation == ["/new/data/a/4.png", "/new/data/b/0.png", "/new/data/b/5.png"] and validation_labels == [0, 1, 1]
    assert sorted(train + validation) == sorted(files)
    drawn = split_off_validation(settings, files, labels, None, 0, None, ("a", "b"))["validation"][0]
    assert drawn != validation  # (the draw holds out others: the list is what was read)
    moved = [p.replace("/new/", "/old/") for p in listed]
    assert sides(moved)[0][0] == validation
    # Names that two classes' subfolders share cannot tell the images apart: drawn again, as before the list was
    # read (a list of relative paths, read from another working directory, held out one image of each class)
    files[:] = [f"/new/data/{c}/sub/{i}.png" for c in ("a", "b") for i in range(6)]
    drawn = split_off_validation(settings, files, labels, None, 0, None, ("a", "b"))["validation"][0]
    assert sides(["data/a/sub/1.png", "data/b/sub/4.png"])[0][0] == drawn


def test_same_images_are_found_by_link_and_by_all_their_bytes_not_by_size_or_head(tmp_path):
    from pipeline.validation.split import same_images
    head = bytes(range(256)) * 16  # 4 KB alike in every file
    paths = {name: tmp_path / f"{name}.gray" for name in ("a", "b", "copy-of-a", "tail-differs", "shorter")}
    for name, tail in (("a", b"x" * 100), ("b", b"y" * 100), ("copy-of-a", b"x" * 100), ("tail-differs", b"x" * 99 + b"z"),
                       ("shorter", b"x" * 99)):
        paths[name].write_bytes(head + tail)
    os.symlink(paths["b"], tmp_path / "link-to-b.gray")
    files = [str(paths[n]) for n in ("a", "b", "copy-of-a", "tail-differs", "shorter")] + \
        [str(tmp_path / "link-to-b.gray"), str(tmp_path / "absent.gray")]
    assert same_images(files) == {str(paths["copy-of-a"]): str(paths["a"]), files[5]: str(paths["b"])}


def test_links_and_copies_of_a_test_image_are_not_trained_on(tmp_path, caplog):
    """The split kept paths apart, not images: a link beside its target, or a train/ and test/ holding
    copies, trained on test images without a word. Your own train/ and test/: the training copy is left
    out. A split made here: an image's copies train with it (none lost, none tested that was trained or twice,
    and every class still tested: moving a test copy to training after the draw left a class with none)."""
    from pipeline.tasks import images_job
    from tests.images_data import make_shapes_folder

    def load(data, model_dir, *flags):
        images_job._DATASETS.clear()  # each load is another run's
        os.makedirs(tmp_path / model_dir, exist_ok=True)
        dataset = images_job.load_dataset(build_parser(images.TASK).parse_args(
            ["--data-dir", data, "--model-dir", str(tmp_path / model_dir), "--image-size", "32", *flags]))
        dataset.save_split()
        return dataset

    def first_image(folder):  # (make_shapes_folder leaves junk beside the images: .DS_Store, notes)
        return next(n for n in sorted(os.listdir(folder)) if n[:3].isdigit())

    def apart(dataset):
        train, test = (set(map(os.path.realpath, dataset.splits[s][0])) for s in ("train", "test"))
        return not train & test
    # train/ and test/ folders, a test image copied into train/
    presplit = str(tmp_path / "presplit")
    make_shapes_folder(os.path.join(presplit, "train"), per_class=4)
    make_shapes_folder(os.path.join(presplit, "test"), per_class=2, seed=1)
    tested = os.path.join(presplit, "test", "circle", first_image(os.path.join(presplit, "test", "circle")))
    trained = os.path.join(presplit, "train", "circle", "zz-copy" + os.path.splitext(tested)[1])
    shutil.copyfile(tested, trained)
    dataset = load(presplit, "m-presplit")
    assert dataset.report["duplicates_left_out"] == [trained] and trained not in dataset.splits["train"][0]
    assert tested in dataset.splits["test"][0]
    assert f"1 training image is a test image too, as a link or a copy ({trained} is {tested}): left out of " \
           "training" in caplog.text
    caplog.clear()
    again = load(presplit, "m-presplit")  # resumed: the same split, and the copy is no image added since
    assert again.splits == dataset.splits and again.report["duplicates_left_out"] == [trained]
    assert "added to the data dir" not in caplog.text
    # a folder split here, a link beside its target and a copy of another image: each pair in training, every
    # class tested, no image left out
    data = make_shapes_folder(str(tmp_path / "data"), per_class=6)
    target = os.path.join(data, "square", first_image(os.path.join(data, "square")))
    link = os.path.join(data, "square", "zz-link" + os.path.splitext(target)[1])
    os.symlink(target, link)
    copied = os.path.join(data, "plus sign", first_image(os.path.join(data, "plus sign")))
    copy = os.path.join(data, "plus sign", "zz-copy" + os.path.splitext(copied)[1])
    shutil.copyfile(copied, copy)
    images_count = 3 * 6 + 2
    for seed in range(6):
        caplog.clear()
        dataset = load(data, f"m{seed}", "--split-seed", str(seed))
        train, test = dataset.splits["train"][0], dataset.splits["test"][0]
        assert apart(dataset) and not ({_bytes(f) for f in train} & {_bytes(f) for f in test})
        assert len(train) + len(test) == images_count and dataset.report["duplicates_left_out"] == []
        assert {link, target, copy, copied} <= set(train)
        assert sorted(set(dataset.splits["test"][1])) == [0, 1, 2]
        assert "2 images are a link to or a copy of another (" in caplog.text
        again = load(data, f"m{seed}", "--split-seed", str(seed))  # resumed: the split it wrote
        assert again.splits == dataset.splits and "added to the data dir" not in caplog.text


def _bytes(path):
    with open(path, "rb") as f:
        return f.read()


def _images_validation(data, model_dir, *flags, resumed=False):
    """Returns (the images job's dataset of `data`, its validation_sides) for a new run into `model_dir`
    (`resumed`: a run resuming there, which reads the split the first one saved)."""
    from pipeline.tasks import images_job
    images_job._DATASETS.clear()
    os.makedirs(model_dir, exist_ok=resumed)
    args = build_parser(images.TASK).parse_args(["--data-dir", str(data), "--model-dir", str(model_dir),
                                                 "--validation-fraction", "0.3", *flags])
    dataset = images_job.load_dataset(args)
    dataset.save_split()
    return dataset, images_job.validation_sides(args, dataset)


def test_an_image_in_two_class_folders_is_named_with_both_classes(tmp_path, caplog):
    """Trained as both labels without a word: a copy, or a link, of one class's image in another's folder."""
    from tests.images_data import make_shapes_folder
    data = make_shapes_folder(str(tmp_path / "data"), per_class=6)
    circle = sorted(n for n in os.listdir(os.path.join(data, "circle")) if n[:3].isdigit())[0]
    copy = os.path.join(data, "square", "zz-circle" + os.path.splitext(circle)[1])
    shutil.copyfile(os.path.join(data, "circle", circle), copy)
    dataset, _ = _images_validation(data, tmp_path / "model")
    assert f"1 of them in another class folder than the image they are ({copy} in 'square' is " \
           f"{os.path.join(data, 'circle', circle)} in 'circle'): the model learns that image as both" in caplog.text
    side = {f: s for s in ("train", "test") for f in dataset.splits[s][0]}
    assert side[copy] == side[os.path.join(data, "circle", circle)]


def test_a_validation_split_held_out_here_trains_every_copy_of_a_training_image(tmp_path, caplog):
    """A copy drawn to validation scored the model on an image it trained on, and flattered the best model."""
    from tests.images_data import make_shapes_folder
    data = make_shapes_folder(str(tmp_path / "data"), per_class=12)
    originals = sorted(os.path.join(d, n) for d, _, names in os.walk(data) for n in names if n[:3].isdigit())
    for i, original in enumerate(originals[::3]):  # a copy of every third image, and a link to one
        shutil.copyfile(original, os.path.join(os.path.dirname(original), f"zz-copy{i}{os.path.splitext(original)[1]}"))
    os.symlink(originals[1], os.path.join(os.path.dirname(originals[1]), "zz-link" + os.path.splitext(originals[1])[1]))
    dataset, sides = _images_validation(data, tmp_path / "model")
    (train, train_labels), (held, held_labels) = sides["train"], sides["validation"]
    assert sorted(train + held) == sorted(dataset.splits["train"][0])  # none lost
    assert dict(zip(train + held, train_labels + held_labels)) == dict(zip(*dataset.splits["train"]))
    assert not {_bytes(f) for f in train} & {_bytes(f) for f in held}  # by the bytes, read here
    assert caplog.text.count("images are a link to or a copy of another (") == 1  # said once, as the data was split
    assert held and sorted(set(held_labels)) == [0, 1, 2]
    caplog.clear()
    _, again = _images_validation(data, tmp_path / "again")
    assert again == sides  # drawn alike in each run
    resumed, on_resume = _images_validation(data, tmp_path / "model", resumed=True)
    assert resumed.twins is None and on_resume == sides  # found again in the training split read back, alike
    assert caplog.text.count("images are a link to or a copy of another (") == 2


def test_a_held_out_copy_of_a_training_image_takes_its_group_to_training(tmp_path, caplog):
    """Grouped (--group-by, a patient's scans): moving the copy alone would part its group."""
    files = []
    for label in ("a", "b"):
        for patient in range(12):
            for scan in range(3):
                path = tmp_path / "data" / label / f"p{label}{patient:02d}-{scan}.png"
                path.parent.mkdir(parents=True, exist_ok=True)
                Image.new("L", (8, 8), color=patient * 3 + scan + (100 if label == "b" else 0)).save(path)
                files.append(str(path))
    pattern = r"^(p\w\d+)-"
    _, plain = _images_validation(tmp_path / "data", tmp_path / "plain", "--group-by", pattern)
    copied = sorted(plain["validation"][0])[0]  # a scan drawn to validation, copied into a patient that trains
    trained = class_folders.group_of(sorted(plain["train"][0])[0], pattern)
    shutil.copyfile(copied, os.path.join(os.path.dirname(copied), f"{trained}-9.png"))
    _, sides = _images_validation(tmp_path / "data", tmp_path / "model", "--group-by", pattern)
    train, held = sides["train"][0], sides["validation"][0]
    assert not {_bytes(f) for f in train} & {_bytes(f) for f in held}
    assert not {class_folders.group_of(f, pattern) for f in train} & {class_folders.group_of(f, pattern) for f in held}
    copy_patient = {class_folders.group_of(copied, pattern), trained}
    assert {class_folders.group_of(f, pattern) for f in train} >= copy_patient  # the two patients, with the copy
    assert held and "each trains with the image it is, with its --group-by group" in caplog.text


@pytest.mark.parametrize("layout", ["split here", "validation fraction", "train and test folders"])
def test_a_class_whose_held_out_or_training_images_are_all_copies_is_refused_by_name(tmp_path, layout):
    """Moving (or leaving out) every copy emptied a class from a side without a word: a split here tested no
    image of it, and your own train/ trained on none of it (3 outputs, 2 classes learned)."""
    from acquisition.errors import InputDataError
    from pipeline.tasks import images_job
    from tests.images_data import make_shapes_folder

    def same_bytes(folder, source, count=None):  # every image of `folder` (or its first `count`) a copy of `source`
        names = sorted(n for n in os.listdir(folder) if n[:3].isdigit())
        for name in names[:count]:
            if os.path.join(folder, name) != source:
                shutil.copyfile(source, os.path.join(folder, name))
    def first(folder):
        return os.path.join(folder, sorted(n for n in os.listdir(folder) if n[:3].isdigit())[0])
    data = str(tmp_path / "data")
    if layout == "split here":
        make_shapes_folder(data, per_class=8)
        same_bytes(os.path.join(data, "circle"), first(os.path.join(data, "circle")))
    else:  # your own train/ and test/; their training circles copies of a test circle, or of one another
        make_shapes_folder(os.path.join(data, "train"), per_class=8)
        make_shapes_folder(os.path.join(data, "test"), per_class=2, seed=1)
        trained = os.path.join(data, "train", "circle")
        same_bytes(trained, first(os.path.join(data, "test", "circle") if layout != "validation fraction" else trained))
    flags = ["--validation-fraction", "0.3"] if layout == "validation fraction" else []
    args = build_parser(images.TASK).parse_args(["--data-dir", data, "--model-dir", str(tmp_path / "model"), *flags])
    os.makedirs(args.model_dir)
    images_job._DATASETS.clear()
    with pytest.raises(InputDataError) as refused:
        images_job.validation_sides(args, images_job.load_dataset(args))
    fragments = {"split here": ["the test split has no image of class 'circle' (8 images)",
                                "7 of them links to or copies of another image, which train",
                                "more images that are not copies"],
                 "validation fraction": ["the validation split has no image of class 'circle' (8 images)",
                                         "7 of them links to or copies", "more images that are not copies"],
                 "train and test folders": ["every training image of class 'circle' is a test image too",
                                            "add images of it to train/"]}[layout]
    assert all(fragment in str(refused.value) for fragment in fragments), str(refused.value)
    assert "\n" not in str(refused.value)


def test_init_from_a_run_that_trained_on_this_run_s_test_images_is_refused_by_path_link_or_copy(tmp_path):
    from pipeline.errors import FlagError
    from pipeline.tasks import images_job
    from tests.images_data import make_shapes_folder
    data = make_shapes_folder(str(tmp_path / "data"), per_class=3)
    files = sorted(os.path.join(d, n) for d, _, names in os.walk(data) for n in names if n[:3].isdigit())
    source = tmp_path / "source" / "split"
    source.mkdir(parents=True)
    (source / "split.json").write_text(json.dumps({"class_names": ["circle", "plus sign", "square"],
                                                   "data_dir": data}))
    (source / "train.txt").write_text(class_folders.split_list_text(files[:5], data))
    check = functools.partial(images_job._check_split_of_init_from, str(tmp_path / "source"),
                              ("circle", "plus sign", "square"))
    check(files[5:])  # none of them trained on
    copy = shutil.copytree(data, str(tmp_path / "copy"))
    for test_files in ([files[2], files[7]], [files[7], os.path.join(copy, os.path.relpath(files[2], data))]):
        with pytest.raises(FlagError, match=r"trained on 1 of this run's 2 test images \(.*\): its split differs"):
            check(test_files)


def test_the_best_copy_takes_a_checkpoint_s_own_files_not_its_damaged_or_half_written_ones(tmp_path):
    # A checkpoint trained again after its first save was set aside (model.ckpt-60.index.damaged beside the new
    # model.ckpt-60.index): the copy to best/ took the damaged files too, a checkpoint's size for nothing.
    own = ["model.ckpt-60.index", "model.ckpt-60.meta", "model.ckpt-60.data-00000-of-00002",
           "model.ckpt-60.data-00001-of-00002"]
    for name in own + ["model.ckpt-60.index.damaged", "model.ckpt-60.data-00000-of-00002.damaged",
                       "model.ckpt-60.index.tmp1f2e", "model.ckpt-600.index", "model.ckpt-6.index"]:
        (tmp_path / name).write_bytes(name.encode())
    kept = BestKeeper(str(tmp_path)).keep({"step": 60}, str(tmp_path / "model.ckpt-60"))
    assert sorted(os.listdir(tmp_path / BEST_DIR)) == sorted(own)
    assert all((tmp_path / BEST_DIR / name).read_bytes() == name.encode() for name in own)
    assert kept["checkpoint"] == str(tmp_path / BEST_DIR / "model.ckpt-60")
