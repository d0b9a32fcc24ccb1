"""Operations a long run meets, with real processes and real signals: stop signals, damaged
checkpoints, two runs on one model dir, a diverging loss, leftovers of killed runs."""
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import time

import pytest
import tensorflow as tf

from tests.conftest import ROOT, assert_clean_failure, default_sighup, small_file_system

TRAIN = os.path.join(ROOT, "scripts", "train_fashion.py")


def command(data_dir, model_dir, *extra):
    return [sys.executable, TRAIN, "--data-dir", data_dir, "--model-dir", str(model_dir), "--batch-size", "16",
            "--checkpoint-steps", "1000", "--log-steps", "50", "--validation-fraction", "0", *extra]


def start(data_dir, model_dir, *extra):
    return subprocess.Popen(command(data_dir, model_dir, *extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=default_sighup)


def wait_for_training(process, model_dir, timeout=120):
    """Waits until the run has written its first checkpoint (step 0) and trained past it."""
    deadline = time.monotonic() + timeout
    while not tf.train.latest_checkpoint(str(model_dir)):
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.05)
    time.sleep(1.5)  # some hundreds of steps, none of them checkpointed (every 1000)


@pytest.mark.parametrize("signum,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130), (signal.SIGHUP, 129)])
def test_a_stop_signal_saves_the_current_step_and_the_rerun_loses_nothing(fashion_data_dir, tmp_path, signum,
                                                                           code):
    model_dir = tmp_path / "m"
    process = start(fashion_data_dir, model_dir, "--max-steps", "100000")
    wait_for_training(process, model_dir)
    sent = time.monotonic()
    process.send_signal(signum)
    out, err = process.communicate(timeout=60)
    seconds = time.monotonic() - sent
    assert process.returncode == code, err[-2000:]
    last = err.strip().splitlines()[-1]
    name = signal.Signals(signum).name
    match = re.fullmatch(rf"train_fashion\.py: stopped by {name} at global step (\d+); checkpoint saved in "
                         rf"{re.escape(str(model_dir))}: run the same command to resume", last)
    assert match, last
    assert "Traceback" not in err
    step = int(match.group(1))
    assert step > 0 and tf.train.latest_checkpoint(str(model_dir)).endswith(f"model.ckpt-{step}")
    print(f"{name}: stopped {seconds:.1f} s after the signal at step {step}")
    if signum != signal.SIGTERM:
        return  # each signal saves through the same stop; SIGTERM's checkpoint is resumed below

    rerun = subprocess.run(command(fashion_data_dir, model_dir, "--max-steps", str(step + 20)),
                           capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    results = json.loads((model_dir / "results.json").read_text())
    assert results["start_global_step"] == step and results["global_step"] == step + 20


def test_a_second_run_on_the_same_model_dir_stops_at_once_naming_the_first(fashion_data_dir, tmp_path):
    model_dir = tmp_path / "m"
    first = start(fashion_data_dir, model_dir, "--max-steps", "100000")
    try:
        wait_for_training(first, model_dir)
        second = subprocess.run(command(fashion_data_dir, model_dir, "--max-steps", "10"), capture_output=True,
                                text=True, timeout=120)
        line = assert_clean_failure(second, f"another run (pid {first.pid} on ", "is using the model dir",
                                    "--model-dir")
        assert second.returncode == 1, line
    finally:
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=60)
    # The first run's lock died with it: a new run takes the model dir over (and trains 2 more steps).
    reached = int(tf.train.latest_checkpoint(str(model_dir)).rsplit("-", 1)[1])
    third = subprocess.run(command(fashion_data_dir, model_dir, "--max-steps", str(reached + 2)),
                           capture_output=True, text=True, timeout=300)
    assert third.returncode == 0, third.stderr[-2000:]


@pytest.fixture(scope="module")
def two_checkpoints_made_once(fashion_data_dir, tmp_path_factory):
    """A model dir trained to step 10, then on to 20, checkpointing every 10 steps (two runs,
    about 15 s): made once, copied for each test that damages it."""
    model_dir = tmp_path_factory.mktemp("two-checkpoints") / "m"
    for steps in (10, 20):
        done = subprocess.run(command(fashion_data_dir, model_dir, "--max-steps", str(steps), "--checkpoint-steps",
                                      "10"), capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
    return model_dir


@pytest.fixture()
def two_checkpoints(two_checkpoints_made_once, fashion_data_dir, tmp_path):
    """A model dir of its own with checkpoints at steps 10 and 20, and the command that trains it
    to 30: a copy of one trained once, its results naming the copy, as two runs there would have
    written them (the checkpoint state names checkpoints alone)."""
    model_dir = copy_model_dir(two_checkpoints_made_once, tmp_path / "m")
    return model_dir, command(fashion_data_dir, model_dir, "--max-steps", "30")


def copy_model_dir(source, model_dir):
    """Returns `model_dir`, a copy of `source` whose results name the copy."""
    shutil.copytree(source, model_dir)
    text = (model_dir / "results.json").read_text()
    assert str(source) in text, text
    (model_dir / "results.json").write_text(text.replace(str(source), str(model_dir)))
    return model_dir


@pytest.fixture()
def two_checkpoints_on_a_small_disk(two_checkpoints_made_once, fashion_data_dir, tmp_path):
    """Like two_checkpoints, on a file system of its own (a tmpfs mounted for the test) with 300 KB left
    after the copy: less than the run's next graph file or checkpoint. Yields the model dir and the command."""
    pages = sum(-(-os.path.getsize(os.path.join(folder, f)) // 4096) for folder, _, files in
                os.walk(two_checkpoints_made_once) for f in files)
    with small_file_system(tmp_path / "small", pages * 4096 + 300_000) as mount:
        model_dir = copy_model_dir(two_checkpoints_made_once, mount / "m")
        yield model_dir, command(fashion_data_dir, model_dir, "--max-steps", "30")


def truncate_data(prefix):
    data = [f for f in os.listdir(os.path.dirname(prefix)) if f.startswith(os.path.basename(prefix) + ".data")][0]
    path = os.path.join(os.path.dirname(prefix), data)
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)  # what a full disk leaves


def flip_a_byte(prefix):
    data = [f for f in os.listdir(os.path.dirname(prefix)) if f.startswith(os.path.basename(prefix) + ".data")][0]
    path = os.path.join(os.path.dirname(prefix), data)
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0x40]))


def remove_index(prefix):
    os.remove(prefix + ".index")


def relative(train, model_dir):
    """Returns `train` naming `model_dir` relative to its parent, the working directory to run it from (a
    relative --model-dir, as the default runs/<job> is: checkpoint files rewritten for it named
    '../../model.ckpt-10')."""
    return dict(args=[os.path.basename(model_dir) if arg == str(model_dir) else arg for arg in train],
                cwd=model_dir.parent)


@pytest.mark.parametrize("damage", [truncate_data, flip_a_byte, remove_index])
def test_a_damaged_newest_checkpoint_falls_back_to_the_one_before(two_checkpoints, damage):
    model_dir, train = two_checkpoints
    damage(str(model_dir / "model.ckpt-20"))
    result = subprocess.run(**relative(train + ["--batch-size", "8"], model_dir), capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "checkpoint model.ckpt-20 is set aside" in result.stderr and "resumes from model.ckpt-10" in result.stderr
    # The resume's warnings are the plan's from step 10, once (those planned from the final step 20, before the
    # damage set it aside, printed too).
    assert re.findall(r"the steps to (\d+) trained at a global batch of 16 and this run trains at 8",
                      result.stderr) == ["10"]
    results = json.loads((model_dir / "results.json").read_text())
    assert results["start_global_step"] == 10 and results["global_step"] == 30
    assert any(f.startswith("model.ckpt-20.") and f.endswith(".damaged") for f in os.listdir(model_dir))


def test_a_finished_run_whose_final_checkpoint_is_damaged_is_reprinted_not_trained_again(two_checkpoints):
    """It set the checkpoint aside and trained the steps from the one before again, a new export and results.json
    with them (faults.md: a finished run run again changes nothing). A run that trains on sets it aside (above)."""
    model_dir, train = two_checkpoints
    flip_a_byte(str(model_dir / "model.ckpt-20"))
    before = {name: (model_dir / name).read_bytes() for name in ("results.json", "checkpoint")}
    files = sorted(os.listdir(model_dir)), sorted(os.listdir(model_dir / "export"))
    result = subprocess.run(train[:-2] + ["--max-steps", "20"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "already finished at global step 20" in result.stdout
    assert f"{model_dir}/model.ckpt-20 cannot be read (" in result.stderr
    assert "the run finished there, and its results and exports are whole" in result.stderr
    assert {name: (model_dir / name).read_bytes() for name in before} == before
    assert (sorted(os.listdir(model_dir)), sorted(os.listdir(model_dir / "export"))) == files


def test_an_early_stopped_run_whose_final_checkpoint_is_damaged_is_reprinted_not_trained_again(fashion_data_dir,
                                                                                              tmp_path):
    # Its start step is below --max-steps: the damaged checkpoint was set aside as for a run that trains on.
    model_dir = tmp_path / "m"
    train = command(fashion_data_dir, model_dir, "--max-steps", "40", "--validation-fraction", "0.1",
                    "--eval-every-steps", "5", "--checkpoint-steps", "5", "--stop-at-accuracy", "0.01")
    first = subprocess.run(train, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    results = json.loads((model_dir / "results.json").read_text())
    assert results["stopped_because"] == "target_accuracy" and 5 <= results["global_step"] < 40
    flip_a_byte(str(model_dir / f"model.ckpt-{results['global_step']}"))
    before = {name: (model_dir / name).read_bytes() for name in ("results.json", "checkpoint")}
    files = sorted(os.listdir(model_dir)), sorted(os.listdir(model_dir / "export"))
    result = subprocess.run(train, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"already finished at global step {results['global_step']}" in result.stdout
    assert "the run finished there, and its results and exports are whole" in result.stderr
    assert {name: (model_dir / name).read_bytes() for name in before} == before
    assert (sorted(os.listdir(model_dir)), sorted(os.listdir(model_dir / "export"))) == files


@pytest.mark.parametrize("damage", ["removed", "cut short"])
def test_a_missing_or_damaged_checkpoint_file_resumes_from_the_newest_checkpoint(two_checkpoints, damage):
    # TensorFlow finds no checkpoint without it, and trained from step 0 over the run's own checkpoints.
    model_dir, train = two_checkpoints
    state = model_dir / "checkpoint"
    state.unlink() if damage == "removed" else state.write_bytes(state.read_bytes()[:25])
    result = subprocess.run(**relative(train, model_dir), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "checkpoint file is missing or damaged" in result.stderr and "it now names model.ckpt-20" in result.stderr
    results = json.loads((model_dir / "results.json").read_text())
    assert results["start_global_step"] == 20 and results["global_step"] == 30
    runs = json.loads((model_dir / "training_progress.json").read_text())["runs"]
    assert [(run["start_step"], run["max_steps"]) for run in runs] == [(0, 10), (10, 20), (20, 30)]  # none from 0


def test_a_max_steps_below_the_step_an_unfinished_run_reached_is_one_line(two_checkpoints):
    # Stopped before its report (no results.json): it planned -10 steps and reported max_steps 10 at step 20.
    model_dir, train = two_checkpoints
    os.remove(model_dir / "results.json")
    before = sorted(os.listdir(model_dir))
    result = subprocess.run(train[:-2] + ["--max-steps", "10"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 2
    assert_clean_failure(result, "--max-steps 10:", "has trained to step 20 already", "--max-steps 20 or more")
    assert sorted(os.listdir(model_dir)) == before


def test_a_run_left_only_its_report_to_write_is_refused_another_precision_or_batch(two_checkpoints):
    # Killed after its last step, before results.json: a run with other flags wrote that report, naming its own
    # precision and batch as the training's (the test evaluation ran in them too).
    model_dir, train = two_checkpoints
    os.remove(model_dir / "results.json")
    trained_in = json.loads((model_dir / "training_progress.json").read_text())["runs"][-1]["precision"]
    other = "fp32" if trained_in == "bf16" else "bf16"
    before = sorted(os.listdir(model_dir))
    base = train[:-2] + ["--max-steps", "20"]
    for flags, named in ((["--precision", other], f"--precision {trained_in}"),
                         (["--batch-size", "8"], "a global batch of 16"),
                         (["--augment", "flip"], "--augment flip=horizontal: the steps to 20 in")):
        result = subprocess.run(base + flags, capture_output=True, text=True, timeout=300)
        assert result.returncode == 2
        assert_clean_failure(result, named)
        assert sorted(os.listdir(model_dir)) == before


def test_a_run_past_its_planned_end_writes_its_report_when_run_again(two_checkpoints):
    # Asynchronous workers step a little past --max-steps: the chief's last checkpoint can be of a later step
    # than the command asks for, and the same command, run again after a kill before its report, must finish.
    model_dir, train = two_checkpoints
    os.remove(model_dir / "results.json")
    record = json.loads((model_dir / "training_progress.json").read_text())
    record["runs"][-1]["max_steps"] = 18  # as if it planned 18 and its workers went on to 20
    (model_dir / "training_progress.json").write_text(json.dumps(record))
    exports = sorted(os.listdir(model_dir / "export"))  # the runs to 10 and to 20 exported theirs
    result = subprocess.run(train[:-2] + ["--max-steps", "18"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    results = json.loads((model_dir / "results.json").read_text())
    assert results["global_step"] == 20
    # The export the killed run made of the same checkpoint is kept, not made again beside it.
    assert sorted(os.listdir(model_dir / "export")) == exports and len(exports) == 2
    assert results["export_dir"] == str(model_dir / "export" / exports[-1])
    assert "kept the export of model.ckpt-20 already at" in result.stderr


def test_a_damaged_best_checkpoint_is_one_line_at_the_test_evaluation(fashion_data_dir, tmp_path):
    # Only the newest checkpoint is read back before training: a best/ cut short was a traceback at the end.
    model_dir = tmp_path / "m"
    train = command(fashion_data_dir, model_dir, "--max-steps", "10", "--validation-fraction", "0.1",
                    "--eval-every-steps", "5")
    assert subprocess.run(train, capture_output=True, text=True, timeout=300).returncode == 0
    os.remove(model_dir / "results.json")
    truncate_data(str(next((model_dir / "best").glob("*.index")))[:-len(".index")])
    result = subprocess.run(train, capture_output=True, text=True, timeout=300)
    assert result.returncode == 1
    assert_clean_failure(result, "the best checkpoint validation kept", "cannot be read", "restore")


def test_an_early_stopped_run_left_only_its_report_to_write_refuses_another_precision(fashion_data_dir, tmp_path):
    # Stopped early, then killed before its report: the run that wrote it went through the early stop's catch-up,
    # where the report's flags went unchecked.
    model_dir = tmp_path / "m"
    train = command(fashion_data_dir, model_dir, "--max-steps", "40", "--validation-fraction", "0.1",
                    "--eval-every-steps", "5", "--stop-at-accuracy", "0.01")
    killed = subprocess.run(train, env=dict(os.environ, PIPELINE_KILL_AT="test_evaluation:1"), capture_output=True,
                            text=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert not (model_dir / "results.json").exists()
    trained_in = json.loads((model_dir / "training_progress.json").read_text())["runs"][-1]["precision"]
    other = "fp32" if trained_in == "bf16" else "bf16"
    result = subprocess.run(train + ["--precision", other], capture_output=True, text=True, timeout=300)
    assert result.returncode == 2
    assert_clean_failure(result, "only its report is left to write", f"--precision {trained_in}")
    again = subprocess.run(train, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert json.loads((model_dir / "results.json").read_text())["stopped_because"] == "target_accuracy"


def test_a_run_killed_before_its_first_step_names_its_step_0_checkpoint(fashion_data_dir, tmp_path):
    """Its model dir holds model.ckpt-0 alone: --eval-only said it held no checkpoint, and a relaunch under another
    --optimizer (no recipe on record yet to compare) was told to keep flags that were the same."""
    model_dir = tmp_path / "m"
    train = command(fashion_data_dir, model_dir, "--max-steps", "20", "--optimizer", "sgd", "--learning-rate", "0.01")
    killed = subprocess.run(train, env=dict(os.environ, PIPELINE_KILL_AT="checkpoint:2"), capture_output=True,
                            text=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert tf.train.latest_checkpoint(str(model_dir)).endswith("model.ckpt-0")
    evaluated = subprocess.run(command(fashion_data_dir, model_dir, "--eval-only"), capture_output=True, text=True,
                               timeout=300)
    assert evaluated.returncode == 1
    assert_clean_failure(evaluated, "holds only the checkpoint of step 0, written before its first step trained")
    other = subprocess.run(command(fashion_data_dir, model_dir, "--max-steps", "20"), capture_output=True, text=True,
                           timeout=300)
    assert other.returncode == 1
    assert_clean_failure(other, "does not fit the model these flags build", "--optimizer, say")


def test_no_readable_checkpoint_is_one_line(two_checkpoints):
    model_dir, train = two_checkpoints
    before = sorted(os.listdir(model_dir))
    for step in (0, 10, 20):
        truncate_data(str(model_dir / f"model.ckpt-{step}"))
    result = subprocess.run(train, capture_output=True, text=True, timeout=300)
    assert_clean_failure(result, "no checkpoint in", "can be read (model.ckpt-20: ", "model.ckpt-10: ", "model.ckpt-0: ",
                         "move them away to train from scratch")
    assert sorted(os.listdir(model_dir)) == before  # nothing renamed, nothing written


def test_a_diverging_loss_stops_with_one_line_naming_the_step_and_the_last_good_checkpoint(fashion_data_dir,
                                                                                          tmp_path):
    result = subprocess.run(command(fashion_data_dir, tmp_path / "m", "--max-steps", "200", "--learning-rate",
                                    "1e7", "--checkpoint-steps", "1"), capture_output=True, text=True, timeout=300)
    line = assert_clean_failure(result, "the training loss became nan at global step",
                                "Lower --learning-rate", "resume from the last good checkpoint, model.ckpt-")
    step = int(re.search(r"at global step (\d+)", line).group(1))
    good = int(re.search(r"checkpoint, model\.ckpt-(\d+)", line).group(1))
    # Saved every step: the checkpoints of the weights that gave the NaN and later were set aside, and
    # earlier ones holding infinite values (Adam's moments overflow before the loss does).
    assert 0 <= good <= step - 2
    assert os.path.exists(tmp_path / "m" / f"model.ckpt-{step - 1}.index.damaged")
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(tmp_path / "m")))
    assert all(tf.math.reduce_all(tf.math.is_finite(reader.get_tensor(n))) for n, dtype in
               reader.get_variable_to_dtype_map().items() if dtype.is_floating)


def test_leftovers_of_killed_runs_are_removed(two_checkpoints):
    model_dir, train = two_checkpoints
    (model_dir / "model.ckpt-25_temp").mkdir()
    (model_dir / "model.ckpt-25_temp" / "part-00000-of-00001.data-00000-of-00001").write_bytes(b"x" * 1000)
    (model_dir / "export" / "temp-1234567890").mkdir(parents=True)
    # A kill between the Saver's rotation of the checkpoint list and its deletions: a checkpoint no longer
    # listed, whole, and one of whose files only the data was left; and a best checkpoint's copy cut short.
    for source in model_dir.glob("model.ckpt-10.*"):
        shutil.copy(source, model_dir / source.name.replace("-10.", "-5."))
        if ".data-" in source.name:
            shutil.copy(source, model_dir / source.name.replace("-10.", "-7."))
    (model_dir / "best").mkdir()
    (model_dir / "best" / "model.ckpt-10.index.tmp").write_bytes(b"x")
    # Files written under a temporary name, then renamed, deeper in the model dir: model_to_estimator's first
    # checkpoint and its state (TensorFlow's names), a TFLite file and an --eval-only report (ours).
    temporary = [model_dir / "keras" / ("checkpoint.tmp" + "0123abcd" * 4),
                 model_dir / "keras" / "keras_model.ckpt.index.tempstate15646289524342867718",
                 model_dir / "keras" / "keras_model.ckpt_temp" / "part-00000-of-00001.data-00000-of-00001.tempstate7",
                 model_dir / "export" / "tflite" / "1234567890" / ".tmp-float32.tflite-k2x9_a1b",
                 model_dir / "eval_only" / ".tmp-report.json-u7w1q0z_"]
    for path in temporary:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x")
    # A kill while the save of step 25 wrote its index (in place, after renaming the data files into place):
    # a checkpoint the `checkpoint` file does not name yet, its index empty.
    for source in model_dir.glob("model.ckpt-20.data-*"):
        shutil.copy(source, model_dir / source.name.replace("-20.", "-25."))
    (model_dir / "model.ckpt-25.index").write_bytes(b"")
    recorded = stats(model_dir, "model.ckpt-10.*", "model.ckpt-20.*")
    result = subprocess.run(train, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert not (model_dir / "model.ckpt-25_temp").exists() and not (model_dir / "export" / "temp-1234567890").exists()
    assert not list(model_dir.glob("model.ckpt-5.*")) and not list(model_dir.glob("model.ckpt-7.*"))
    assert not (model_dir / "best" / "model.ckpt-10.index.tmp").exists()
    assert not any(path.exists() for path in temporary) and not (model_dir / "keras" / "keras_model.ckpt_temp").exists()
    assert not list(model_dir.glob("model.ckpt-25.*")) and not list(model_dir.glob("*.damaged"))
    assert json.loads((model_dir / "results.json").read_text())["start_global_step"] == 20
    # Listed checkpoints are kept for the Saver's own rotation; the one resumed from is not written again.
    assert stats(model_dir, "model.ckpt-10.*", "model.ckpt-20.*") == recorded


def stats(model_dir, *patterns):
    """Returns each file matching `patterns` in `model_dir` with its inode, size and modification time."""
    return {p.name: (p.stat().st_ino, p.stat().st_size, p.stat().st_mtime_ns)
            for pattern in patterns for p in model_dir.glob(pattern)}


def test_only_names_of_the_exact_temporary_forms_are_leftovers_and_a_folder_s_own_files_stay(tmp_path):
    """--model-dir on a folder of yours: `photos_temp/`, `paper.tmp1`, `.tmp-notes` looked like leftovers
    (`*_temp`, `*.tmp[0-9a-f]*`, `.tmp-*`) and went, in a run that then failed on its data, too."""
    from pipeline.model_dir import remove_leftovers
    leftovers = ["model.ckpt-25_temp/part-00000-of-00001.data-00000-of-00001", "graph.pbtxt.tmp" + "9f" * 16,
                 "keras/keras_model.ckpt_temp/part-00000-of-00001.index", "keras/checkpoint.tmp" + "0a" * 16,
                 "keras/keras_model.ckpt.data-00000-of-00001.tempstate123", ".tmp-results.json-ab_9xyz0",
                 "eval_only/.tmp-report.json-0123abcd", "export/temp-1732800000/saved_model.pb",
                 "export/tflite/1732800000/.tmp-int8.tflite-q1w2e3r4", "best/model.ckpt-10.index.tmp",
                 "eval_only/export/temp-1732800001/saved_model.pb"]
    yours = ["photos_temp/cat.jpg", "my_temp_files/a.txt", "paper.tmp1", "notes.tmp", ".tmp-notes", ".tmpfile",
             "export/temp-mine/b", "export/temperature.csv", "keras/weights_temp.h5", "draft.tempstate",
             "eval_only/.tmp-report.json-1", "data.tmp" + "0" * 31, "export/tflite/1/.tmp-x"]
    for name in leftovers + yours:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"x")
    removed = {os.path.relpath(p, tmp_path) for p in remove_leftovers(str(tmp_path))}
    assert removed == {name.split("/part-")[0] if "_temp/" in name else
                       os.path.dirname(name) if "/temp-" in name else name for name in leftovers}
    assert all((tmp_path / name).read_bytes() == b"x" for name in yours)


def test_a_first_checkpoint_cut_short_is_removed_and_whole_ones_without_the_checkpoint_file_are_kept(
        two_checkpoints):
    # With no `checkpoint` file (a run's first save cut short before the Saver wrote it), only checkpoints
    # that do not read back are a cut save's: whole ones may be a user's, whatever named them.
    from pipeline.model_dir import remove_leftovers
    model_dir, _ = two_checkpoints
    os.remove(model_dir / "checkpoint")
    (model_dir / "model.ckpt-20.index").write_bytes(b"")
    cut, whole = sorted(model_dir.glob("model.ckpt-20.*")), stats(model_dir, "model.ckpt-0.*", "model.ckpt-10.*")
    assert sorted(remove_leftovers(str(model_dir))) == [str(p) for p in cut]
    assert not list(model_dir.glob("model.ckpt-20.*")) and stats(model_dir, "model.ckpt-0.*", "model.ckpt-10.*") == whole


def test_a_finished_run_killed_before_its_hparams_record_writes_it_when_run_again(two_checkpoints):
    # The record of the run's settings and figures for TensorBoard's HParams dashboard comes after results.json:
    # a kill in between left it empty, and every later run of the command stopped at "already finished".
    from pipeline.cli import train_main
    from pipeline.tasks.fashion import TASK
    from reporting import hparams
    model_dir, train = two_checkpoints
    for path in model_dir.glob(f"events.out.tfevents.*{hparams.EVENTS_SUFFIX}"):
        path.write_bytes(b"")
    assert not hparams.recorded(str(model_dir))
    results = (model_dir / "results.json").read_bytes()
    assert train_main(TASK, train[2:-2] + ["--max-steps", "20"]) == 0  # finished at 20 already
    assert hparams.recorded(str(model_dir)) and (model_dir / "results.json").read_bytes() == results


def test_a_finished_run_on_read_only_storage_points_to_its_results_in_one_line(two_checkpoints, tmp_path):
    # An archived finished run, run again, said only to pass another --model-dir, as if it held nothing.
    if os.geteuid() != 0:
        pytest.skip("a read-only bind mount needs root (as .ci/run has)")
    model_dir, train = two_checkpoints
    archived = tmp_path / "archived"
    archived.mkdir()
    subprocess.run(["mount", "--bind", str(model_dir), str(archived)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(archived)], check=True)
        before = sorted(os.listdir(archived))
        argv = [str(archived) if arg == str(model_dir) else arg for arg in train[:-2]] + ["--max-steps", "20"]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=300)
        assert_clean_failure(result, f"cannot write to the model dir {archived} (Read-only file system): the "
                                     f"results.json of its run is there to read (scripts/compare_runs.py {archived} "
                                     "shows it)", "make it writable, or pass --model-dir")
        assert sorted(os.listdir(archived)) == before
    finally:
        subprocess.run(["umount", "--lazy", str(archived)], check=True)


def test_a_damaged_results_json_is_written_again_with_a_warning_saying_what_it_held(two_checkpoints):
    # results.json is written whole (atomically): damaged, by a disk fault or a hand, it was replaced in silence,
    # and the training figures of the runs before with it.
    model_dir, train = two_checkpoints
    whole = json.loads((model_dir / "results.json").read_text())
    (model_dir / "results.json").write_text((model_dir / "results.json").read_text()[:100])
    result = subprocess.run(train[:-2] + ["--max-steps", "20"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    (line,) = [l for l in result.stderr.splitlines() if "results.json cannot be read" in l]
    assert f" W {model_dir / 'results.json'} cannot be read (" in line and "training figures it held" in line
    written = json.loads((model_dir / "results.json").read_text())
    assert written["global_step"] == whole["global_step"] == 20
    assert written["eval_accuracy"] == whole["eval_accuracy"]  # the same best checkpoint, evaluated again


@pytest.mark.skipif(not shutil.which("strace"), reason="strace is missing (.ci/run installs it)")
def test_a_kill_while_a_checkpoint_index_is_written_loses_nothing(two_checkpoints):
    # TensorFlow's Saver renames a checkpoint's data files into place, then writes its index in place: a
    # SIGKILL then tears it. strace kills the run at its first write to the index of the checkpoint it
    # resumed from (which the Estimator's own saver hook wrote again at the session's start) or of the one
    # it saves next (step 30), as a scheduler's kill landing at that moment would.
    model_dir, train = two_checkpoints
    resumed_from = stats(model_dir, "model.ckpt-20.*")
    watched = [arg for step in (20, 30) for arg in ("-P", str(model_dir / f"model.ckpt-{step}.index"))]
    killed = subprocess.run(["strace", "-f", "-qq", "-o", os.devnull, "-e", "trace=write",
                             "-e", "inject=write:signal=KILL", *watched, *train],
                            capture_output=True, text=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert stats(model_dir, "model.ckpt-20.*") == resumed_from
    assert (model_dir / "model.ckpt-30.index").stat().st_size == 0  # the kill landed in the write
    again = subprocess.run(train, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert re.search(r"removed what an interrupted run left: .*model\.ckpt-30\.index", again.stderr), again.stderr
    assert not list(model_dir.glob("*.damaged"))
    results = json.loads((model_dir / "results.json").read_text())
    assert results["start_global_step"] == 20 and results["global_step"] == 30


def test_a_checkpoint_cut_before_its_meta_graph_is_trained_again(two_checkpoints):
    # A kill between the Saver's writing of the `checkpoint` file and of the newest checkpoint's .meta.
    model_dir, train = two_checkpoints
    os.remove(model_dir / "model.ckpt-20.meta")
    result = subprocess.run(**relative(train, model_dir), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    results = json.loads((model_dir / "results.json").read_text())
    assert results["start_global_step"] == 10 and results["global_step"] == 30  # steps 11-20 trained again
    state = tf.train.get_checkpoint_state(str(model_dir))
    assert state.model_checkpoint_path.endswith("model.ckpt-30")
    assert all(os.path.exists(p + ".meta") for p in state.all_model_checkpoint_paths)
    assert not [f for f in os.listdir(model_dir) if f.endswith(".damaged")]


def limit_file_size(limit):
    """A child's preexec: files larger than `limit` bytes cannot be written (EFBIG), as on a full disk."""
    def apply():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a failed write, not a killed process
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


@pytest.mark.parametrize("limit,what", [(300_000, "graph.pbtxt"), (800_000, "checkpoint data")])
def test_a_full_disk_is_one_line_loses_nothing_and_its_leftovers_go(two_checkpoints, limit, what):
    model_dir, train = two_checkpoints
    before = {f: (model_dir / f).read_bytes() for f in os.listdir(model_dir)
              if f.startswith(("model.ckpt-", "results.json", "checkpoint"))}
    full = subprocess.run(train, capture_output=True, text=True, timeout=300, preexec_fn=limit_file_size(limit))
    assert_clean_failure(full, "a write failed:", "File too large", "run the same command: it resumes")
    assert {f: (model_dir / f).read_bytes() for f in before} == before  # every checkpoint and result intact
    assert any("_temp" in f or ".tmp" in f for f in os.listdir(model_dir)), what  # half-written leftovers
    again = subprocess.run(train, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert not any("_temp" in f or ".tmp" in f for f in os.listdir(model_dir))
    assert json.loads((model_dir / "results.json").read_text())["global_step"] == 30


def test_a_disk_that_fills_up_is_one_line_naming_it_not_memory_and_loses_nothing(two_checkpoints_on_a_small_disk):
    model_dir, train = two_checkpoints_on_a_small_disk
    before = {f: (model_dir / f).read_bytes() for f in os.listdir(model_dir)
              if f.startswith(("model.ckpt-", "results.json", "checkpoint"))}
    full = subprocess.run(train, capture_output=True, text=True, timeout=300)
    # TensorFlow raises ENOSPC as a ResourceExhaustedError, the class it raises for memory too
    assert_clean_failure(full, "a write failed: No space left on device (", "the disk is full",
                         "pass another --model-dir", "run the same command: it resumes")
    assert "memory" not in full.stderr
    assert {f: (model_dir / f).read_bytes() for f in before} == before  # every checkpoint and result intact
    # (the resume after a full disk, and its removal of the leftovers, are the file-size limit test's)


def test_output_sent_to_a_file_on_a_full_disk_is_one_line_naming_that_file(fashion_data_dir, tmp_path):
    # `train ... > out.txt` on a full disk: its advice named --model-dir and a checkpoint to resume from.
    with small_file_system(tmp_path / "full", 16 << 10) as full:
        (full / "filler").write_bytes(b"\0" * 16384)
        with open(full / "out.txt", "w") as out:
            result = subprocess.run(command(fashion_data_dir, tmp_path / "m", "--max-steps", "2"), stdout=out,
                                    stderr=subprocess.PIPE, text=True, timeout=300)
    assert result.returncode == 1 and "Exception ignored" not in result.stderr
    result.stdout = ""
    assert_clean_failure(result, f"error: writing the output to {full / 'out.txt'} failed: No space left on device; "
                                 "free some space on its disk, or send the output to a file on another disk")
