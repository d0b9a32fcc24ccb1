"""A run resumed with other flags than it started with, through the command line: --epochs counts
images, so a stop and a resume with another global batch train the epochs asked, no more, no less."""
import json
import os
import re
import signal
import subprocess

from pipeline.model_dir import LOCK_FILES
from tests.conftest import assert_clean_failure
from tests.scripts.test_stop_and_damage import command, start, wait_for_training


def test_a_resume_with_a_doubled_batch_trains_the_images_that_remain(fashion_data_dir, tmp_path):
    model_dir = tmp_path / "m"
    process = start(fashion_data_dir, model_dir, "--epochs", "1000")  # batch 16: 50 steps an epoch
    wait_for_training(process, model_dir)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 143, err[-2000:]
    step = int(re.search(r"at global step (\d+)", err.strip().splitlines()[-1]).group(1))
    trained = 16 * step

    # One epoch (800 images) more than trained so far, at twice the batch: 25 steps of 32.
    epochs = (trained + 800) / 800
    rerun = subprocess.run(command(fashion_data_dir, model_dir, "--epochs", repr(epochs), "--batch-size", "32"),
                           capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert f"to global step {step + 25}, resuming from step {step}" in rerun.stdout
    assert f"images:        {trained:,} trained ({trained / 800:.3g} epochs); 800 to train (1 epochs) in 25 steps " \
           f"of 32 of the {trained + 800:,} asked ({epochs:.3g} epochs)" in rerun.stdout
    results = json.loads((model_dir / "results.json").read_text())
    assert results["global_step"] == step + 25
    assert results["images_trained"] == trained + 800 and results["epochs_trained"] == round(epochs, 4)
    assert results["epochs_requested"] == epochs

    # Asked again, the run is finished: the images are trained, whatever the batch now is.
    again = subprocess.run(command(fashion_data_dir, model_dir, "--epochs", repr(epochs), "--batch-size", "8"),
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and f"already finished at global step {step + 25}" in again.stdout, again.stderr
    # its per-class lines in class order, as the run printed them (results.json's keys are sorted)
    per_class = [line.split()[0] for line in again.stdout.splitlines() if " recall " in line]
    assert per_class == [name.split()[0] for name in results["clinical"]["class_names"]], again.stdout
    # and its report's headline, as the run printed it (the reprint had none)
    headline = rerun.stdout[rerun.stdout.index("  report:  accuracy "):]
    assert again.stdout.endswith(headline) and headline.rstrip().endswith(str(model_dir / "report.md")), again.stdout

    # A smaller --max-steps cannot take training back, and says so.
    behind = subprocess.run(command(fashion_data_dir, model_dir, "--max-steps", "5"), capture_output=True,
                            text=True, timeout=300)
    assert behind.returncode == 0 and f"already finished at global step {step + 25} (on " in behind.stdout
    assert "), past the final step 5 these flags ask for (training cannot go back)" in behind.stdout

    # Generated data would mix into the real data's epochs and figures: refused, nothing touched.
    before = {f: (model_dir / f).read_bytes() for f in os.listdir(model_dir) if os.path.isfile(model_dir / f)
              and f not in LOCK_FILES}
    other = subprocess.run(command(fashion_data_dir, model_dir, "--synthetic", "--epochs", "1000"),
                           capture_output=True, text=True, timeout=300)
    assert_clean_failure(other, "was trained on real data of 800 training images, and this run's is generated data "
                                "of 60,000 training images", "pass another --model-dir")
    assert other.returncode == 2  # a flag to drop, as a changed --test-fraction is
    assert {f: (model_dir / f).read_bytes() for f in before} == before


def test_a_resume_under_another_recipe_is_refused_naming_the_flags_and_the_same_one_goes_on(tmp_path, capsys):
    # results.json describes the run by one --augment, one schedule, ...: steps trained with others would be hidden.
    from pipeline.cli import train_main
    from pipeline.tasks.fashion import TASK
    model_dir = tmp_path / "m"
    recipe = ["--augment", "flip,translate=0.1", "--lr-schedule", "cosine", "--label-smoothing", "0.1"]

    def run(*argv):
        return train_main(TASK, ["--synthetic", "--model-dir", str(model_dir), "--batch-size", "16",
                                 "--bootstrap-resamples", "20", *argv])
    assert run("--max-steps", "2", *recipe) == 0, capsys.readouterr().err[-2000:]
    capsys.readouterr()
    assert run("--max-steps", "4", "--lr-schedule", "cosine") == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.endswith(f"error: --augment none --label-smoothing 0: the steps to 2 in {model_dir} trained with "
                         "--augment flip=horizontal,translate=0.1 --label-smoothing 0.1; resume with those (its results "
                         f"describe one recipe), or pass another --model-dir (--init-from {model_dir} starts a new run "
                         "from its weights)"), line
    assert not list(model_dir.glob("model.ckpt-4.*"))
    assert run("--max-steps", "4", *recipe, "--batch-size", "8") == 0  # another batch: the images that remain
    results = json.loads((model_dir / "results.json").read_text())
    assert results["global_step"] == 4 and results["augment"] == [["flip", "horizontal"], ["translate", 0.1]]
