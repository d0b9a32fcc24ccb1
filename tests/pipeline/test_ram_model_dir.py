"""A whole run on TensorFlow's in-process file system, ram://: train, resume, evaluate, export
and predict, with the model dir, the data dir and the peak cache there, and the working folder
and HOME (empty temporary folders) left empty. ram:// stands in for gs:// offline; it does not
show GCS's own rename behaviour (see docs/storage.md)."""
import json
import os
import sys

import tensorflow as tf

from acquisition import storage
from pipeline.cli import train_main
from pipeline.validation.best import SCORES_SUFFIX
from pipeline.tasks.images import TASK
from serving.export import COMPLETE_MARKER
from serving.predict import classify_files, load_predictor
from tests.images_data import make_shapes_folder

PROG = os.path.basename(sys.argv[0])  # what argparse names the program: the test runner's


def test_a_whole_run_on_ram(tmp_path, monkeypatch, capsys):
    local = make_shapes_folder(str(tmp_path / "shapes"), per_class=12)
    ram = f"ram://{tmp_path.name}"  # ram:// lives as long as the process: a root of this test's own
    data, model_dir, cache = f"{ram}/data", f"{ram}/runs/shapes", f"{ram}/cache/peak_flops.json"
    storage.copy_tree(local, data)
    peak = os.environ.get("PIPELINE_PEAK_CACHE")
    if peak and os.path.isfile(peak):  # the suite's probed peak, read from ram:// from now on
        storage.write_atomically(cache, storage.read_bytes(peak))
    monkeypatch.setenv("PIPELINE_PEAK_CACHE", cache)
    cwd, home = tmp_path / "cwd", tmp_path / "home"
    cwd.mkdir()
    home.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("MPLCONFIGDIR", str(tmp_path / "matplotlib"))  # matplotlib's font cache, not the run's
    common = ["--data-dir", data, "--model-dir", model_dir, "--image-size", "32", "--batch-size", "8",
              "--validation-fraction", "0.2", "--eval-every-steps", "2", "--warm-up-steps", "0",
              "--positive-classes", "circle"]  # a referral threshold: the best's validation scores kept

    assert train_main(TASK, common + ["--max-steps", "2"]) == 0
    assert tf.train.latest_checkpoint(model_dir).endswith("model.ckpt-2")
    assert "is in this process's memory (ram://): its checkpoints, export and results.json are gone when the run " \
        "ends" in capsys.readouterr().err
    assert train_main(TASK, common + ["--max-steps", "4"]) == 0  # resumed
    results = json.loads(storage.read_text(storage.join(model_dir, "results.json")))
    assert (results["start_global_step"], results["global_step"]) == (2, 4)
    assert results["model_dir"] == model_dir and results["data_root"] == data
    segments = json.loads(storage.read_text(storage.join(model_dir, "training_progress.json")))["runs"]
    assert [s["start_step"] for s in segments] == [0, 2]
    validation = json.loads(storage.read_text(storage.join(model_dir, "validation.json")))
    assert [e["step"] for e in validation["evaluations"]] == [2, 4]
    best = storage.listdir(storage.join(model_dir, "best"))  # the best checkpoint's copy, and its scores
    assert f"model.ckpt-{validation['best']['step']}.index" in best
    assert f"model.ckpt-{validation['best']['step']}{SCORES_SUFFIX}" in best
    for name in ("train.txt", "test.txt", "split.json"):
        assert storage.read_text(storage.join(model_dir, "split", name))
    assert storage.isfile(storage.join(model_dir, "validation_files.txt"))
    assert storage.isfile(storage.join(model_dir, "report.md"))
    export_dir = results["export_dir"]
    assert export_dir.startswith(model_dir + "/export/") and storage.isfile(storage.join(export_dir, COMPLETE_MARKER))
    assert not storage.exists(storage.join(model_dir, ".run.lock"))  # the lease, removed at the end

    capsys.readouterr()
    assert train_main(TASK, common + ["--max-steps", "4", "--eval-only"]) == 0
    out = capsys.readouterr().out
    assert "eval:    accuracy" in out and "results: (not written: --eval-only)" in out

    predictor = load_predictor(model_dir)  # the model dir's newest whole export
    assert predictor.export_dir == export_dir
    answers = list(classify_files(predictor, [storage.join(data, "circle")]))
    assert len(answers) == 12 and all(a["class"] in ("circle", "square", "plus sign") for a in answers)

    assert os.listdir(cwd) == [] and os.listdir(home) == []


def test_the_fashion_job_refuses_a_url_data_dir_in_one_line(tmp_path, monkeypatch, capsys):
    from pipeline.tasks.fashion import TASK as FASHION
    monkeypatch.chdir(tmp_path)
    assert train_main(FASHION, ["--data-dir", "ram://fashion", "--model-dir", "runs/f", "--max-steps", "1"]) == 1
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"{PROG}: error: --data-dir ram://fashion: the Fashion-MNIST job downloads and converts its IDX files on "
        "local disk only; pass a local folder (model dirs may be on a bucket: --model-dir)")
    assert os.listdir(tmp_path) == [] and not storage.exists("ram://fashion")  # (runs/f, made, went: it held nothing)
