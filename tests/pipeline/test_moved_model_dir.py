"""A model dir moved or copied (renamed, rsynced from a cluster) resumes, evaluates and converts from its
own files: never from, into or against the folder it was trained in."""
import hashlib
import json
import os
import shutil

import tensorflow as tf

from pipeline.flags import build_parser
from pipeline.roles import run
from pipeline.tasks.fashion import TASK


def train(fashion_data_dir, model_dir, *extra):
    argv = ["--data-dir", fashion_data_dir, "--model-dir", str(model_dir), "--batch-size", "16", "--lr-scaling",
            "none", "--eval-every-steps", "10", "--warm-up-steps", "1", "--bootstrap-resamples", "10",
            "--precision", "fp32", *extra]  # fp32: --tflite converts no bf16 export
    return run(TASK, build_parser(TASK).parse_args(argv))


def tree_digest(folder):
    """Returns {relative path: sha256} of every file below `folder`."""
    return {os.path.relpath(os.path.join(parent, name), folder):
            hashlib.sha256(open(os.path.join(parent, name), "rb").read()).hexdigest()
            for parent, _, names in os.walk(folder) for name in names}


def recorded_paths(model_dir):
    """Returns every path results.json and validation.json of `model_dir` record for its best and export."""
    results = json.loads((model_dir / "results.json").read_text())
    best = json.loads((model_dir / "validation.json").read_text())["best"]
    return [results["export_dir"], results["best"]["export_dir"], best["checkpoint"], best["export_dir"]]


def test_a_moved_model_dir_resumes_from_its_own_checkpoints_and_keeps_its_best(fashion_data_dir, tmp_path, capsys):
    first, moved, copy = tmp_path / "first", tmp_path / "moved", tmp_path / "copy"
    train(fashion_data_dir, first, "--max-steps", "20")
    state = tf.train.get_checkpoint_state(str(first))
    with open(first / "checkpoint") as f:
        assert str(first) not in f.read()  # checkpoints named by name: the file holds no folder
    # As the Savers before wrote it (absolute paths), which TensorFlow then read as no checkpoint at all.
    tf.compat.v1.train.update_checkpoint_state(str(first), state.model_checkpoint_path,
                                               all_model_checkpoint_paths=list(state.all_model_checkpoint_paths))
    with open(first / "checkpoint") as f:
        assert f"{first}/model.ckpt-20" in f.read()
    best_export = json.loads((first / "results.json").read_text())["export_dir"]
    os.rename(first, moved)

    resumed = train(fashion_data_dir, moved, "--max-steps", "30")
    assert resumed["start_global_step"] == 20 and resumed["global_step"] == 30
    assert not first.exists()  # nothing was looked for, made or removed at the old place
    assert all(path.startswith(f"{moved}/") for path in recorded_paths(moved)), recorded_paths(moved)
    exports = os.listdir(moved / "export")
    assert exports == [os.path.basename(resumed["export_dir"])]  # the best's, whichever step it is
    if resumed["best"]["step"] == 20:  # the moved best stayed the best: kept, not removed as another folder's
        assert exports == [os.path.basename(best_export)]

    # --eval-only --tflite on a copy converts the copy's export, into the copy; the moved dir stays as it is.
    shutil.copytree(moved, copy)
    before = tree_digest(moved)
    capsys.readouterr()
    again = train(fashion_data_dir, copy, "--max-steps", "30", "--eval-only", "--tflite", "float32")
    header = capsys.readouterr().out  # says what it does: nothing trained
    assert "none trained (--eval-only)" in header and "(step 30), is evaluated" in header
    assert "to global step" not in header and "learning rate:" not in header
    assert again["export_dir"].startswith(f"{copy}/") and again["eval_step"] == resumed["eval_step"]
    converted = again["tflite"]
    assert converted["dir"].startswith(f"{copy}/") and os.path.isfile(converted["files"]["float32"]["file"])
    assert tree_digest(moved) == before

    # A finished run (the copy's results.json is the moved dir's) moved again answers with the paths of its
    # files where they are now, and changes nothing.
    os.rename(copy, tmp_path / "again")
    before = tree_digest(tmp_path / "again")
    finished = train(fashion_data_dir, tmp_path / "again", "--max-steps", "30")
    assert str(moved) not in json.dumps(finished) and finished["model_dir"] == str(tmp_path / "again")
    assert os.path.isdir(finished["export_dir"]) and finished["best"]["export_dir"] == finished["export_dir"]
    assert tree_digest(tmp_path / "again") == before


def test_a_moved_model_dir_whose_checkpoint_file_lists_no_checkpoints_is_pointed_here(tmp_path):
    # A checkpoint file with model_checkpoint_path alone (another tool's): the rewrite took the empty list's last.
    from pipeline.model_dir import restorable_checkpoint
    prefix = str(tmp_path / "model.ckpt-20")
    tf.train.Checkpoint(weights=tf.Variable([1.0])).write(prefix)
    (tmp_path / "checkpoint").write_text('model_checkpoint_path: "/old/place/model.ckpt-20"\n')
    assert restorable_checkpoint(str(tmp_path)) == prefix
    assert tf.train.latest_checkpoint(str(tmp_path)) == prefix
