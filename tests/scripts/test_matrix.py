"""A matrix of the combinations users make, run to the end, for each job (train_fashion.py,
train_oct.py, train_images.py): every pair of two choices' values (data, devices, precision,
validation, early stopping, --augment, --mixup/--cutmix/--label-smoothing together, --deterministic,
--class-weight, and whether --eval-only evaluates the model dir again) meets in at least one cell that
trains a few steps, reports the settings it applied in results.json and exports a model predict.py
answers from. A combination that makes no sense is refused in one line, exit 2, before training; a
pair only such cells hold is listed in IMPOSSIBLE, with why, and is not counted as covered.

The cells are an all-pairs design (tests/allpairs.py), made from each job's factors and the refusal
rule below; test_the_cells_cover_every_pair checks the design's claim. Every cell runs in this
process (conftest splits the CPU in two logical devices), as its script would: the same
run_command, parser and run loop; one cell of each job also runs scripts/predict.py.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from acquisition import fashion_mnist
from pipeline.cli import run_command
from pipeline.flags import build_parser
from pipeline.tasks import fashion_job
from pipeline.tasks.oct import TASK as OCT
from pipeline.validation.early_stopping import improvements_ago
from tests.allpairs import all_pairs, every_pair, pairs_of
from tests.matrix_design import AUGMENT, CELLS, DATA_SOURCE, DESIGN, DISTRIBUTION, EVERY, FACTORS, IMPOSSIBLE, \
    JOB_FLAGS, MAX_STEPS, MIXING, MIXING_OFF, PER_REPLICA_BATCH, REFUSED, SGD_WEIGHT_DECAY, SYNTHETIC_TEST, TASKS, \
    cell_id, command, cost, refusal
from tests.conftest import FASHION_SAMPLE, OCT_CLASSES, ROOT
from tests.images_data import SHAPE_CLASSES, make_shapes_folder

def run(task, argv):
    """Runs a training script's command line in this process, as the script does (pipeline.cli.train_main);
    returns (exit code, the dict the run returned: results.json's, or --eval-only's figures)."""
    from pipeline import roles
    returned = {}

    def work(args):
        returned["results"] = roles.run(task, args)
    return run_command(build_parser(task), work, argv), returned.get("results")


# --- data, shared by the cells -----------------------------------------------------------------------

@pytest.fixture(scope="module", autouse=True)
def small_synthetic_test_sets():
    """--synthetic's test sets, the real datasets' sizes (10,000, 968 and 2,000 images), cut to a few batches
    (not whole ones: the last batch of a mirrored evaluation stays short): VGG16 scored OCT's 968 in 8 s."""
    from pipeline.tasks import images_job, oct_job
    with pytest.MonkeyPatch.context() as patch:
        for job, module in (("fashion", fashion_job), ("oct", oct_job), ("images", images_job)):
            patch.setitem(module.SYNTHETIC_SIZES, "test", SYNTHETIC_TEST[job])
        yield


@pytest.fixture(scope="module")
def fashion_default(tmp_path_factory):
    """The Fashion job's default --data-dir, empty, whose download fails at once (no network): a run
    falls back to the 1,000-image sample shipped in the repo, as a user's first run offline does."""
    root = tmp_path_factory.mktemp("fashion-default")
    data_dir = str(root / "fashion-mnist")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fashion_job, "DEFAULT_DATA_DIR", data_dir)
        yield ["--data-dir", data_dir, "--download-url", f"file://{root}/nowhere"]


@pytest.fixture(scope="module")
def oct_records(oct_tree, tmp_path_factory):
    """prepare_oct.py's shards of the real OCT sample at 32 pixels."""
    from pipeline.tasks import oct_job
    out = str(tmp_path_factory.mktemp("oct-records"))
    oct_job.prepare_records(os.path.dirname(oct_tree), out, 32)
    return out


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    """A folder of 3 class folders of generated images in every format the job reads: 20 squares, 20 plus
    signs and 12 circles (so that --class-weight balanced weighs the circles more)."""
    root = make_shapes_folder(str(tmp_path_factory.mktemp("shapes") / "shapes"), per_class=20)
    for name in os.listdir(os.path.join(root, "circle")):
        if name[:3].isdigit() and int(name[:3]) >= 12:
            os.remove(os.path.join(root, "circle", name))
    return root


@pytest.fixture(scope="module")
def fashion_png(tmp_path_factory):
    images, _ = fashion_mnist.load_split(FASHION_SAMPLE, "test")
    path = str(tmp_path_factory.mktemp("fashion-png") / "item.png")
    Image.fromarray(images[0]).save(path)
    return path


@pytest.fixture(scope="module")
def jobs(fashion_default, oct_tree, oct_records, shapes, fashion_png, oct_sample):
    """{job: (data flags by data value, an image predict.py classifies, the export's class names by data)}."""
    scan = os.path.join(oct_sample, "NORMAL", sorted(os.listdir(os.path.join(oct_sample, "NORMAL")))[0])
    oct_root = os.path.dirname(oct_tree)
    return {
        "fashion": ({"sample": fashion_default, "synthetic": ["--synthetic"]}, fashion_png,
                    {"sample": list(fashion_mnist.CLASS_NAMES), "synthetic": list(fashion_mnist.CLASS_NAMES)}),
        "oct": ({"jpeg": ["--data-dir", oct_root], "synthetic": ["--synthetic"],
                 "records": ["--records-dir", oct_records],
                 "cache": ["--data-dir", oct_root, "--cache", "memory"]}, scan,
                dict.fromkeys(FACTORS["oct"]["data"], list(OCT_CLASSES))),
        "images": ({"folder": ["--data-dir", shapes], "synthetic": ["--synthetic"]},
                   os.path.join(shapes, "circle", "000.jpg"),
                   {"folder": sorted(SHAPE_CLASSES), "synthetic": [f"class_{i}" for i in range(10)]}),
    }


# --- the design --------------------------------------------------------------------------------------

@pytest.mark.parametrize("job", FACTORS)
def test_the_cells_cover_every_pair(job):
    cells, impossible = DESIGN[job]
    assert all(refusal(cell) is None for cell in cells)
    covered = set().union(*(pairs_of(cell) for cell in cells))
    uncovered = every_pair(FACTORS[job]) - covered
    assert uncovered == set(IMPOSSIBLE[job]) == set(impossible)  # the refused pairs, and no other
    refused = [cell for name, cell in REFUSED if name == job]
    for pair in IMPOSSIBLE[job]:  # each shown refused by a cell of its own
        assert any(pair in pairs_of(cell) for cell in refused), pair
    assert 8 <= len(cells) <= 16, len(cells)


def test_the_design_is_small_and_the_same_every_time():
    again = {job: all_pairs(factors, refusal, cost) for job, factors in FACTORS.items()}
    assert again == DESIGN
    assert 30 <= len(CELLS) <= 42, len(CELLS)


# --- the cells ---------------------------------------------------------------------------------------

def check_results(job, cell, results, class_count):
    """Asserts that results.json's figures are the settings `cell` asked for."""
    replicas = 1 if cell["devices"] == "1" else 2
    validating, stop = cell["validation"] == "on", cell["early_stop"]
    expected = {
        "task": job, "data_source": DATA_SOURCE[cell["data"]], "replicas": replicas, "precision": cell["precision"],
        "augment": AUGMENT if cell["augment"] == "on" else [], "deterministic": cell["deterministic"] == "on",
        "seed": 0 if cell["deterministic"] == "on" else None, "per_replica_batch_size": PER_REPLICA_BATCH[job],
        "global_batch_size": PER_REPLICA_BATCH[job] * replicas, "max_steps": MAX_STEPS, "xla": False,
        "early_stopping": {"monitor": "validation_accuracy", "stop_at_accuracy": 0.0 if stop == "target" else None,
                           "patience": 1 if stop == "patience" else None,
                           "min_delta": 0.0 if stop == "patience" else None} if validating else None,
        **(MIXING if cell["mixing"] == "on" else MIXING_OFF),
        "optimizer": cell["optimizer"], "weight_decay": SGD_WEIGHT_DECAY if cell["optimizer"] == "sgd" else 0.0,
    }
    assert {key: results[key] for key in expected} == expected
    assert results["distribution"].startswith(DISTRIBUTION[cell["devices"]]), results["distribution"]
    if cell["data"] == "synthetic":
        assert results["eval_examples"] == SYNTHETIC_TEST[job]
    evaluations = results["evaluations"]
    if not validating:
        assert results["validation_examples"] == 0 and evaluations == [] and results["best"] is None
        assert results["stopped_because"] == "max_steps" and results["global_step"] == results["eval_step"] == MAX_STEPS
    else:
        assert results["validation_examples"] > 0 and results["best"] is not None
        assert results["eval_step"] == results["best"]["step"]
        assert results["export_dir"] == results["best"]["export_dir"]
        if stop == "target":  # stopped at the first evaluation
            assert results["stopped_because"] == "target_accuracy" and results["global_step"] == EVERY
            assert [e["step"] for e in evaluations] == [EVERY]
        else:
            assert [e["step"] for e in evaluations] == list(range(EVERY, MAX_STEPS + 1, EVERY))
            flat = stop == "patience" and improvements_ago(evaluations) >= 1
            assert results["stopped_because"] == ("patience" if flat else "max_steps")
            assert results["global_step"] == MAX_STEPS
    if job == "images":  # small_resnet from random weights, every layer trained
        assert (results["model"], results["weights"], results["trainable_layers"]) == ("small_resnet", "none", "all")
        weights = results.get("class_weights")
        if cell["class_weight"] == "none" or cell["data"] == "synthetic":
            assert weights is None
        else:  # circle (the first class) is the rare one
            assert len(weights) == class_count and weights[0] > 1 > max(weights[1:])
    if job == "oct":
        assert results.get("cache") == ("memory" if cell["data"] == "cache" else None)
        assert ("records_dir" in results) == (cell["data"] == "records")


def check_eval_only(job, cell, argv, results, text, model_dir, capfd):
    """Runs --eval-only on the trained model dir with the cell's flags; asserts that it scores the same
    checkpoint alike and writes no results.json nor export."""
    code, again = run(TASKS[job], argv + ["--eval-only"])
    out, err = capfd.readouterr()
    assert code == 0, err[-3000:]
    assert "Traceback" not in out + err, err[-3000:]
    assert ("so this run evaluates on the 1,000-image" in err) == (cell["data"] == "sample"), err[-3000:]
    assert "\n  eval batch:    " in out and "\n  batch:" not in out  # the batch it evaluates in, named so
    assert again["eval_step"] == results["eval_step"] and again["export_dir"] == results["export_dir"]
    if cell["deterministic"] == "on":
        assert again["eval_accuracy"] == results["eval_accuracy"]
    with open(os.path.join(model_dir, "results.json")) as f:
        assert f.read() == text
    assert os.listdir(os.path.join(model_dir, "export")) == [os.path.basename(results["export_dir"])]


def first_of_each_job():
    seen, firsts = set(), []
    for job, cell in CELLS:
        if job not in seen:
            seen.add(job)
            firsts.append((job, cell))
    return firsts


@pytest.mark.parametrize("job, cell", CELLS, ids=[cell_id(c) for c in CELLS])
def test_a_cell_trains_and_predicts(job, cell, jobs, tmp_path, capfd):
    from serving.predict import classify_files, load_predictor
    data, image, class_names = jobs[job]
    names = class_names[cell["data"]]
    model_dir = str(tmp_path / "model")
    argv = command(job, cell, data, model_dir)

    code, returned = run(TASKS[job], argv)
    out, err = capfd.readouterr()
    assert code == 0, err[-3000:]
    assert "Traceback" not in out + err, err[-3000:]
    assert ("so this run trains on the 1,000-image" in err) == (cell["data"] == "sample"), err[-3000:]
    with open(os.path.join(model_dir, "results.json")) as f:
        text = f.read()
    results = json.loads(text)
    assert results == json.loads(json.dumps(returned))
    check_results(job, cell, results, len(names))

    if cell["eval_only"] == "on":
        check_eval_only(job, cell, argv, results, text, model_dir, capfd)

    # The export predict.py finds from the model dir: the one results.json names.
    assert os.path.isfile(os.path.join(results["export_dir"], "saved_model.pb"))
    predictor = load_predictor(model_dir)
    assert predictor.export_dir == results["export_dir"] and predictor.class_names == names
    (answer,) = classify_files(predictor, [image])
    assert answer["class"] in names and sum(answer["probabilities"].values()) == pytest.approx(1.0, abs=1e-4)
    assert answer["class"] == max(answer["probabilities"], key=answer["probabilities"].get)
    if (job, cell) in first_of_each_job():  # and scripts/predict.py as a user runs it
        done = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "predict.py"), "--model", model_dir,
                               "--json", image], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
        printed = json.loads(done.stdout)
        assert printed["class"] == answer["class"]
        assert np.allclose(list(printed["probabilities"].values()), list(answer["probabilities"].values()), atol=1e-5)


@pytest.mark.parametrize("job, cell", REFUSED, ids=[cell_id(c) for c in REFUSED])
def test_refused_cells_say_why_in_one_line_before_training(job, cell, jobs, tmp_path, capfd):
    data, _, _ = jobs[job]
    model_dir = str(tmp_path / "model")
    code, _ = run(TASKS[job], command(job, cell, data, model_dir))
    out, err = capfd.readouterr()
    assert code == 2, err[-3000:]
    assert "Traceback" not in out + err, err[-3000:]
    errors = [line for line in err.splitlines() if ": error: " in line]
    assert len(errors) == 1 and errors[0] == err.strip().splitlines()[-1], err[-3000:]
    assert refusal(cell) in errors[0]
    if cell["data"] == "synthetic":  # no advice the data cannot take
        assert "--validation-fraction above 0" not in errors[0]
    written = os.listdir(model_dir) if os.path.isdir(model_dir) else []
    assert not [name for name in written if name.startswith(("model.ckpt", "checkpoint", "results.json"))], written


# --- beside the matrix: what one value of the data factor cannot go with ------------------------------

@pytest.mark.parametrize("extra, fragment", [
    (["--records-dir", "{records}", "--cache", "{tmp}/cache"], "--cache DIR keeps decoded scans in files"),
    (["--synthetic", "--cache", "memory"], "--cache keeps the decoded, resized training scans"),
    (["--synthetic", "--decode", "reduced"], "--decode reduced decodes JPEG files, and --synthetic data"),
    (["--records-dir", "{records}", "--data-dir", "{tmp}"], "--records-dir trains and tests on the prepared shards, "
                                                            "and reads no --data-dir; drop --data-dir"),
    (["--records-dir", "{records}", "--shuffle-buffer", "64"], "--shuffle-buffer shuffles the images a --cache holds"),
])
def test_oct_data_that_cannot_go_together_is_refused(extra, fragment, oct_records, tmp_path, capfd):
    argv = [a.format(records=oct_records, tmp=tmp_path) for a in extra]
    code, _ = run(OCT, ["--model-dir", str(tmp_path / "model"), *JOB_FLAGS["oct"], "--max-steps", "2",
                        "--validation-fraction", "0", *argv])
    err = capfd.readouterr().err
    assert code == 2 and fragment in err.strip().splitlines()[-1], err[-3000:]
    assert not os.path.exists(tmp_path / "model" / "checkpoint")


def test_oct_shards_kept_in_memory_train(oct_records, tmp_path, capfd):
    code, results = run(OCT, ["--model-dir", str(tmp_path / "model"), *JOB_FLAGS["oct"], "--max-steps", "2",
                              "--validation-fraction", "0", "--warm-up-steps", "1", "--bootstrap-resamples", "10",
                              "--records-dir", oct_records, "--cache", "memory"])
    out, err = capfd.readouterr()
    assert code == 0 and "Traceback" not in out + err, err[-3000:]
    assert results["cache"] == "memory" and results["records_dir"] == oct_records and results["global_step"] == 2
