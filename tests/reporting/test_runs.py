"""Runs compared side by side: the HParams events each run writes, and compare_runs.py's table
of several real model dirs."""
import csv
import glob
import io
import json
import os
import shutil
import subprocess
import sys

import pytest
import tensorflow as tf
from tensorboard.plugins.hparams import metadata as hparams_metadata

from pipeline.cli import train_main
from pipeline.tasks.fashion import TASK
from reporting import RunsError, compare

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Three real runs that differ in the settings a comparison is for.
RUNS = {"small_fp32": ["--batch-size", "8"], "large_fp32": ["--batch-size", "16"],
        "small_bf16": ["--batch-size", "8", "--precision", "bf16"]}


@pytest.fixture(scope="module")
def runs_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("runs")
    for name, flags in RUNS.items():
        assert train_main(TASK, ["--synthetic", "--max-steps", "2", "--model-dir", str(folder / name),
                                 "--warm-up-steps", "0", *flags]) == 0
    return folder


def _events(model_dir, suffix):
    (path,) = glob.glob(os.path.join(model_dir, f"events.out.tfevents.*{suffix}"))
    return list(tf.compat.v1.train.summary_iterator(path))


def test_each_run_logs_its_settings_and_final_figures_for_the_hparams_dashboard(runs_folder):
    model_dir = str(runs_folder / "small_bf16")
    results = json.load(open(os.path.join(model_dir, "results.json")))
    settings, figures = None, {}
    for event in _events(model_dir, ".hparams"):
        for value in event.summary.value:
            if value.metadata.plugin_data.plugin_name == hparams_metadata.PLUGIN_NAME:
                info = hparams_metadata.parse_session_start_info_plugin_data(value.metadata.plugin_data.content)
                settings = {name: getattr(v, v.WhichOneof("kind")) for name, v in info.hparams.items()}
            else:
                figures[value.tag] = (event.step, value.simple_value)
    assert settings["precision"] == "bf16" and settings["per_replica_batch"] == 8
    assert settings["replicas"] == results["replicas"] and settings["global_batch"] == results["global_batch_size"]
    assert settings["learning_rate"] == pytest.approx(results["learning_rate_base"])
    assert settings["augment"] == "none" and settings["model"]
    assert figures["final/test_accuracy"] == (2, pytest.approx(results["eval_accuracy"]))
    assert figures["final/test_loss"] == (2, pytest.approx(results["eval_loss"]))


def test_compare_runs_prints_one_row_per_model_dir_of_a_folder(runs_folder):
    result = subprocess.run([sys.executable, os.path.join(REPO, "scripts", "compare_runs.py"), str(runs_folder)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    header, rule, *rows = result.stdout.strip().splitlines()
    columns = [c.strip() for c in header.strip("|").split("|")]
    assert len(rows) == 3 and set(rule.strip("|").split("|")) <= {"---", "---:"}
    table = {os.path.basename(cells[0]): dict(zip(columns, cells)) for cells in
             ([c.strip() for c in row.strip("|").split("|")] for row in rows)}
    assert sorted(table) == sorted(RUNS)
    for name in RUNS:
        results = json.load(open(runs_folder / name / "results.json"))
        assert table[name]["precision"] == results["precision"]
        assert table[name]["batch"] == str(results["global_batch_size"])
        assert table[name]["test acc"] == f"{results['eval_accuracy']:.4f}"


def test_csv_and_model_dirs_on_another_file_system(runs_folder):
    for name in RUNS:  # ram://, TensorFlow's in-process file system, stands in for gs://
        tf.io.gfile.makedirs(f"ram://runs/{name}")
        tf.io.gfile.copy(str(runs_folder / name / "results.json"), f"ram://runs/{name}/results.json", overwrite=True)
    rows = list(csv.reader(io.StringIO(compare.as_csv(compare.table_rows(
        compare.find_runs(["ram://runs/large_fp32", str(runs_folder / "small_fp32")]))))))
    assert [row[0] for row in rows[1:]] == ["ram://runs/large_fp32", str(runs_folder / "small_fp32")]
    assert rows[1][rows[0].index("batch")] == "16"


def test_a_folder_without_runs_and_a_half_written_results_file_are_named(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(RunsError, match="empty holds no results.json"):
        compare.find_runs([str(tmp_path / "empty")])
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "results.json").write_text('{"task": ')
    with pytest.raises(RunsError, match="is not valid JSON .*: it is damaged .*; run that run's command again"):
        compare.find_runs([str(tmp_path / "half")])


def test_a_damaged_results_file_in_a_folder_of_runs_is_left_out_with_a_warning(tmp_path, caplog):
    """One damaged results.json failed the whole table of a folder of runs."""
    for name, text in (("good", '{"task": "fashion"}'), ("half", '{"task": ')):
        (tmp_path / "runs" / name).mkdir(parents=True)
        (tmp_path / "runs" / name / "results.json").write_text(text)
    assert compare.find_runs([str(tmp_path / "runs")]) == [(str(tmp_path / "runs" / "good"), {"task": "fashion"})]
    assert "left out 1 run of" in caplog.text and "results.json is damaged (not valid JSON): half" in caplog.text
    shutil.rmtree(tmp_path / "runs" / "good")
    with pytest.raises(RunsError, match="half/results.json is not valid JSON"):  # nothing else to show
        compare.find_runs([str(tmp_path / "runs")])


def test_a_results_file_given_itself_is_its_run_and_one_holding_no_object_is_named(tmp_path):
    """It said an existing results.json 'does not exist', and one holding a list raised an AttributeError."""
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "results.json").write_text('{"task": "fashion"}')
    assert compare.find_runs([str(tmp_path / "run" / "results.json")]) == [(str(tmp_path / "run"),
                                                                            {"task": "fashion"})]
    (tmp_path / "list").mkdir()
    (tmp_path / "list" / "results.json").write_text("[1, 2]")
    with pytest.raises(RunsError, match="results.json holds a JSON list, not a run's results"):
        compare.find_runs([str(tmp_path / "list")])
    (tmp_path / "list" / "results.json").write_text("{}")  # it made a blank row
    with pytest.raises(RunsError, match="results.json holds a JSON object without a task, not a run's results"):
        compare.find_runs([str(tmp_path / "list")])
    # In a folder of runs, a benchmark's output beside them is left out with a warning (it failed the whole table);
    # a folder of such alone is still named
    (tmp_path / "runs").mkdir()
    shutil.copytree(tmp_path / "run", tmp_path / "runs" / "run")
    shutil.copytree(tmp_path / "list", tmp_path / "runs" / "bench")
    assert compare.find_runs([str(tmp_path / "runs")]) == [(str(tmp_path / "runs" / "run"), {"task": "fashion"})]
    shutil.rmtree(tmp_path / "runs" / "run")
    with pytest.raises(RunsError, match="bench/results.json holds a JSON object without a task"):
        compare.find_runs([str(tmp_path / "runs")])
    (tmp_path / "afile").write_text("")  # it said the file did not exist
    with pytest.raises(RunsError, match=r"afile is a file, not a model dir: pass the model dir of a finished run"):
        compare.find_runs([str(tmp_path / "afile")])


def test_unfinished_runs_of_a_folder_are_named_and_the_data_source_shown(tmp_path, caplog):
    for name, source in (("real", "real"), ("sample", "real (shipped 1,000-image sample)"), ("synth", "synthetic")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps({"task": "fashion", "data_source": source}))
    (tmp_path / "stopped").mkdir()
    (tmp_path / "stopped" / "training_progress.json").write_text("{}")
    (tmp_path / "notes").mkdir()  # not a run: not named
    rows = compare.table_rows(compare.find_runs([str(tmp_path)]))
    assert [row[rows[0].index("data")] for row in rows[1:]] == ["real", "sample", "synthetic"]
    assert f"left out 1 run of {tmp_path} with no results.json yet (unfinished, or stopped): stopped" in caplog.text


def test_the_recipe_column_tells_apart_runs_that_differ_only_in_the_generalisation_tools():
    """measure_generalisation.py's arms (plain, --ema, --label-smoothing, --mixup/--cutmix) showed the same
    row in every settings column."""
    plain = {"seed": 1, "ema": None, "label_smoothing": 0.0, "mixup": 0.0, "cutmix": 0.0, "tta": [],
             "class_weights": None, "clinical": {"calibration": {"temperature": {"temperature": 0.6676}}}}
    arms = [plain, {**plain, "ema": {"decay": 0.99}}, {**plain, "label_smoothing": 0.1},
            {**plain, "mixup": 0.2, "cutmix": 1.0}, {**plain, "tta": ["identity", "flip"], "clinical": {}},
            {**plain, "seed": None, "class_weights": [1.5, 0.75]}, {},
            {"init_from": {"model_dir": "/runs/pets-head/", "step": 120, "chosen": "best"}, "seed": 2},
            {**plain, "optimizer": "adam", "weight_decay": 0.05}, {**plain, "optimizer": "sgd", "weight_decay": 0.0},
            {**plain, "mixup": 0.2, "cutmix": 1.0, "mix_switch_prob": 0.8},
            {**plain, "mixup": 0.2, "mix_switch_prob": 0.8}]
    column = compare.table_rows([(f"run{i}", arm) for i, arm in enumerate(arms)])[0].index("recipe")
    recipes = [row[column] for row in compare.table_rows([(f"run{i}", arm) for i, arm in enumerate(arms)])[1:]]
    assert recipes == ["seed 1, temperature 0.67", "seed 1, ema 0.99, temperature 0.67",
                       "seed 1, label-smoothing 0.1, temperature 0.67", "seed 1, mixup 0.2, cutmix 1, temperature 0.67",
                       "seed 1, tta identity+flip", "class-weight, temperature 0.67", "",
                       "init-from pets-head step 120, seed 2",  # (a fine-tuning's second stage looked like a first)
                       "seed 1, weight-decay 0.05, temperature 0.67", "seed 1, sgd, temperature 0.67",
                       "seed 1, mixup 0.2, cutmix 1, mix-switch-prob 0.8, temperature 0.67",
                       "seed 1, mixup 0.2, temperature 0.67"]  # (the switch acts only with both)


def test_a_run_folder_named_with_a_bar_keeps_its_row_whole():
    rows = [["run", "test acc"], ["runs/a|b", "0.5000"]]
    assert compare.as_markdown(rows).splitlines()[-1] == "| runs/a\\|b | 0.5000 |"
