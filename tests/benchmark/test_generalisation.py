"""The generalisation measurement (issue 33, part 8): its paired statistics against closed forms
and enumeration, its bookkeeping of kept reports, and its command line's refusals."""
import json
import math
import os
import statistics
import subprocess
import sys
import time

import pytest

from benchmark import generalisation, paired
from pipeline.errors import FlagError, TrainingError, UsageError
from tests.conftest import ROOT, assert_ends


@pytest.mark.parametrize("probability", [0.9, 0.975, 0.995])
def test_t_quantiles_match_the_closed_forms_of_one_and_two_degrees(probability):
    cauchy = math.tan(math.pi * (probability - 0.5))
    two = (2 * probability - 1) / math.sqrt(2 * probability * (1 - probability))
    assert paired.student_t_quantile(probability, 1) == pytest.approx(cauchy, rel=1e-4)
    assert paired.student_t_quantile(probability, 2) == pytest.approx(two, rel=1e-5)


def test_t_quantiles_approach_the_normal_and_exceed_it_below():
    normal = statistics.NormalDist().inv_cdf(0.975)
    assert paired.student_t_quantile(0.975, 2000) == pytest.approx(normal, rel=1e-3)
    assert paired.student_t_quantile(0.975, 4) > paired.student_t_quantile(0.975, 10) > normal


def test_the_sign_flip_p_counts_the_assignments_as_far_from_zero():
    assert paired.sign_flip_p([0.1, 0.2, 0.3, 0.4, 0.5]) == 2 / 32  # only all-plus and all-minus are as far
    assert paired.sign_flip_p([1.0, -1.0, 1.0, -1.0]) == 1.0  # a mean of 0: every assignment is as far
    # 3, 1, -1 sums to 3; flipped: 3, 5, 1, 3 and their negatives, so 6 of 8 are at least 3 from 0
    assert paired.sign_flip_p([3.0, 1.0, -1.0]) == 6 / 8


def test_compare_pairs_by_position_and_counts_by_direction():
    # two seeds: the interval is mean +- t(0.975, 1) * sd / sqrt(2), with sd = sqrt(2) here
    result = paired.compare([0.5, 0.6], [1.5, 3.6], higher_is_better=True)
    half = math.tan(math.pi * 0.475)
    assert result["difference"] == pytest.approx(2.0)
    assert result["ci"] == pytest.approx([2.0 - half, 2.0 + half], rel=1e-4)
    assert (result["better"], result["worse"]) == (2, 0)
    lower = paired.compare([0.5, 0.6], [1.5, 3.6], higher_is_better=False)
    assert (lower["better"], lower["worse"]) == (0, 2)
    with pytest.raises(ValueError, match="same seeds"):
        paired.compare([1.0, 2.0], [1.0], higher_is_better=True)


def _report(accuracy, nll, ece, nll_after, ece_after):
    return {"accuracy": {"value": accuracy}, "calibration": {"temperature": {
        "test_nll": {"before": nll, "after": nll_after}, "test_ece": {"before": ece, "after": ece_after}}}}


def test_figures_read_before_or_after_the_temperature():
    report = _report(0.8, 0.6, 0.1, 0.5, 0.03)
    assert generalisation.figures(report) == {"accuracy": 0.8, "nll": 0.6, "ece": 0.1}
    assert generalisation.figures(report, after_temperature=True) == {"accuracy": 0.8, "nll": 0.5, "ece": 0.03}


def test_summarise_pairs_seeds_the_baseline_has_and_skips_the_rest():
    arms = generalisation.build_arms(0.99, 0.1, 0.2, 1.0, "flip")
    rows = [{"seed": s, "arm": "baseline", "accuracy": a, "nll": 1.0, "ece": 0.1} for s, a in [(3, 0.7), (1, 0.5)]]
    rows += [{"seed": s, "arm": "ema", "accuracy": a, "nll": 0.9, "ece": 0.2} for s, a in [(1, 0.6), (3, 0.9), (7, 0.0)]]
    summary = generalisation.summarise(rows, arms)
    assert summary["baseline"]["accuracy"] == [0.5, 0.7]
    assert summary["ema"]["accuracy"]["n"] == 2 and summary["ema"]["accuracy"]["difference"] == pytest.approx(0.15)
    assert (summary["ema"]["nll"]["better"], summary["ema"]["ece"]["worse"]) == (2, 2)
    assert "tta" not in summary
    text = generalisation.markdown(summary, arms, "header")
    assert "| --ema 0.99 | +0.1500" in text and "| plain run (mean) | 0.6000 | 1.0000 | 0.1000 |" in text


def test_a_kept_report_is_reused_and_the_temperature_arm_reads_the_baselines(tmp_path):
    arms = generalisation.build_arms(0.99, 0.1, 0.2, 1.0, "flip")
    os.makedirs(tmp_path / "reports")
    (tmp_path / "reports" / "baseline-seed4.json").write_text(json.dumps(_report(0.8, 0.6, 0.1, 0.5, 0.03)))
    # no such script: a run would fail, so each figure below comes from the kept report
    rows = generalisation.measure("absent.py", [], {k: arms[k] for k in ("baseline", "temperature")}, [4],
                                  str(tmp_path), progress=lambda line: None)
    assert [(r["arm"], r["nll"]) for r in rows] == [("baseline", 0.6), ("temperature", 0.5)]


FAKE_JOB = """
import json, os, sys
model_dir = sys.argv[sys.argv.index("--model-dir") + 1]
folder = os.path.join(model_dir, "eval_only") if "--eval-only" in sys.argv else model_dir
os.makedirs(folder, exist_ok=True)
accuracy = 0.5 if "--eval-only" in sys.argv else 0.8
scaling = {"test_nll": {"before": 0.6, "after": 0.5}, "test_ece": {"before": 0.1, "after": 0.03}}
with open(os.path.join(folder, "report.json"), "w") as f:
    json.dump({"accuracy": {"value": accuracy}, "calibration": {"temperature": scaling}}, f)
"""


def test_the_tta_arm_reads_the_report_its_eval_only_run_writes_beside_the_baselines(tmp_path, monkeypatch):
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "train_fake.py").write_text(FAKE_JOB)
    monkeypatch.setattr(generalisation, "ROOT", str(tmp_path))
    arms = generalisation.build_arms(0.99, 0.1, 0.2, 1.0, "flip")
    rows = generalisation.measure("train_fake.py", [], {k: arms[k] for k in ("baseline", "tta")}, [1],
                                  str(tmp_path / "out"), progress=lambda line: None)
    assert [(r["arm"], r["accuracy"]) for r in rows] == [("baseline", 0.8), ("tta", 0.5)]
    assert json.loads((tmp_path / "out" / "reports" / "baseline-seed1.json").read_text())["accuracy"]["value"] == 0.8


def test_relative_paths_are_the_user_s_and_a_second_measurement_in_the_same_output_is_refused(tmp_path,
                                                                                                  monkeypatch):
    """The runs were started in the repo: a relative --output trained into the checkout, and the measurement then
    looked for the reports in the user's folder; a second measurement of the same --output wrote into the
    first one's logs."""
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "train_fake.py").write_text(FAKE_JOB)
    monkeypatch.setattr(generalisation, "ROOT", str(tmp_path))
    (tmp_path / "mine").mkdir()
    monkeypatch.chdir(tmp_path / "mine")
    arms = {"baseline": generalisation.build_arms(0.99, 0.1, 0.2, 1.0, "flip")["baseline"]}
    with generalisation.holding_output("out"):
        with pytest.raises(UsageError, match=rf"another measurement \(pid {os.getpid()} on .*\) is running in "
                                             r"--output out; wait for it to finish, or pass another --output"):
            with generalisation.holding_output("out"):
                pass
        rows = generalisation.measure("train_fake.py", [], arms, [1], "out", progress=lambda line: None)
    assert rows[0]["accuracy"] == 0.8
    assert (tmp_path / "mine" / "out" / "runs" / "baseline-seed1" / "report.json").exists()
    assert not (tmp_path / "out").exists()
    with generalisation.holding_output("nothing"):  # a folder it made and left empty goes
        pass
    assert not (tmp_path / "mine" / "nothing").exists()


def test_an_output_folder_goes_on_only_with_the_flags_it_was_begun_with(tmp_path):
    arms = generalisation.build_arms(0.99, 0.1, 0.2, 1.0, "flip")
    generalisation.claim_output(str(tmp_path), ["--max-steps", "20"], arms)
    generalisation.claim_output(str(tmp_path), ["--max-steps", "20"], arms)  # the same: goes on
    with pytest.raises(FlagError, match="made with other flags: the job's flags were '--max-steps 20', now "
                                        "'--max-steps 400'; pass another --output"):
        generalisation.claim_output(str(tmp_path), ["--max-steps", "400"], arms)
    with pytest.raises(FlagError, match="the arms' flags were"):
        generalisation.claim_output(str(tmp_path), ["--max-steps", "20"],
                                    generalisation.build_arms(0.9, 0.1, 0.2, 1.0, "flip"))
    # With the parsed settings on record, the same flags in another order are the same measurement.
    settings = {"batch_size": "16", "max_steps": "300"}
    generalisation.claim_output(str(tmp_path / "b"), ["--batch-size", "16", "--max-steps", "300"], arms, settings)
    generalisation.claim_output(str(tmp_path / "b"), ["--max-steps", "300", "--batch-size", "16"], arms, settings)
    with pytest.raises(FlagError, match="the job's flags were '--batch-size 16 --max-steps 300', now"):
        generalisation.claim_output(str(tmp_path / "b"), ["--max-steps", "30", "--batch-size", "16"], arms,
                                    {**settings, "max_steps": "30"})


def test_an_output_folder_holding_a_report_no_measurement_made_is_refused(tmp_path):
    """A user's report.md and results.csv there were overwritten."""
    arms = generalisation.build_arms(0.99, 0.1, 0.2, 1.0, "flip")
    (tmp_path / "report.md").write_text("mine")
    with pytest.raises(FlagError, match=f"--output {tmp_path} holds report.md, which no measurement made there"):
        generalisation.claim_output(str(tmp_path), ["--max-steps", "20"], arms)
    assert os.listdir(tmp_path) == ["report.md"] and (tmp_path / "report.md").read_text() == "mine"


def test_a_failed_run_names_its_last_line_and_its_log(tmp_path):
    log = str(tmp_path / "run.log")
    with pytest.raises(TrainingError, match=r"exited 3: train.py: error: no data \(log: .*run.log\)"):
        generalisation._run([sys.executable, "-c", "import sys; print('noise'); "
                             "print('train.py: error: no data', file=sys.stderr); sys.exit(3)"], log)



def test_a_job_refusing_its_flags_is_a_flag_error_that_leaves_the_output_free_for_other_flags(tmp_path, monkeypatch):
    """It exited 1, and the corrected command was then refused: the output held a plan of the bad flags."""
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "train_fake.py").write_text(
        "import sys\nif '--bad' in sys.argv:\n    print('train_fake.py: error: --bad: no such thing', "
        "file=sys.stderr); sys.exit(2)\n" + FAKE_JOB)
    monkeypatch.setattr(generalisation, "ROOT", str(tmp_path))
    arms = {"baseline": generalisation.build_arms(0.99, 0.1, 0.2, 1.0, "flip")["baseline"]}
    out = str(tmp_path / "out")
    generalisation.claim_output(out, ["--bad"], arms)
    with pytest.raises(FlagError, match=r"exited 2: train_fake.py: error: --bad: no such thing \(log: "):
        generalisation.measure("train_fake.py", ["--bad"], arms, [1], out, progress=lambda line: None)
    generalisation.claim_output(out, [], arms)  # nothing was measured: the corrected flags take the folder
    assert [r["arm"] for r in generalisation.measure("train_fake.py", [], arms, [1], out,
                                                     progress=lambda line: None)] == ["baseline"]


CHILD = """
import os, sys, time
from cluster.lifeline import follow_launcher
assert follow_launcher() is not None
open(sys.argv[1], "w").write(str(os.getpid()))
time.sleep(120)
"""
PARENT = """
import sys
from benchmark import generalisation
generalisation._run([sys.executable, "-c", sys.argv[1], sys.argv[2]], sys.argv[3])
"""


def test_a_run_ends_when_the_measurement_is_killed(tmp_path):
    pid_file = tmp_path / "child.pid"
    parent = subprocess.Popen([sys.executable, "-c", PARENT, CHILD, str(pid_file), str(tmp_path / "run.log")],
                              cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT))
    deadline = time.monotonic() + 60
    while not pid_file.exists() or not pid_file.read_text():
        assert parent.poll() is None and time.monotonic() < deadline, (tmp_path / "run.log").read_text()
        time.sleep(0.05)
    child = int(pid_file.read_text())
    parent.kill()
    parent.wait(timeout=30)
    assert_ends(child, 30, "the run outlived the measurement that started it")


@pytest.mark.parametrize("argv, fragment", [
    (["--seed", "3"], "argument --seed: the measurement sets it for each run"),
    (["--ema=0.9"], "argument --ema: the measurement sets it"),
    (["--seeds", "4"], "argument --seeds: expected two or more different seeds"),
    (["--seeds", "1,1"], "argument --seeds: expected two or more different seeds"),
    (["--seeds", "1,2,1"], "argument --seeds: a seed repeats in '1,2,1'"),
    (["--epochs", "-1"], "--epochs"),  # the job's own parser checks the job's flags
    (["--arms", "ema,swa"], "argument --arms: expected arms of ema, label_smoothing"),
    (["--arms", "sgd,sgd"], "argument --arms: names sgd twice"),
    (["--weight-decay", "0.1", "--arms", "weight_decay", "--weight-decay=-1"], "argument --weight-decay"),
    (["--arms", "sgd", "--optimizer", "sgd"], "argument --optimizer: the measurement sets it for each run"),
    (["--arms", "ema", "--weight-decay", "0.01"], "argument --weight-decay: sets the weight_decay arm's value, and "
                                                  "--arms does not name that arm"),
    (["--sgd-rate", "0.1"], "argument --sgd-rate: sets the sgd arm's value, and --arms does not name that arm"),
    # The job's flags of the same names: the tool took them for its arms' and measured without them.
    (["--arms", "ema", "--mixup", "0.3"], "argument --mixup: sets the mixup_cutmix arm's value, and --arms does not"),
    (["--arms", "ema", "--cutmix=1"], "argument --cutmix: sets the mixup_cutmix arm's value"),
    (["--arms", "tta", "--label-smoothing", "0.1"], "argument --label-smoothing: sets the label_smoothing arm's"),
    (["--arms", "tta", "--ema-decay", "0.9"], "argument --ema-decay: sets the ema arm's value"),
    (["--arms", "ema", "--tta", "flip"], "argument --tta: sets the tta arm's value"),
])
def test_the_command_line_refuses_in_one_line_with_exit_2(argv, fragment, tmp_path):
    result = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "measure_generalisation.py"),
                             "--task", "fashion", "--output", str(tmp_path / "out"), *argv],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert fragment in result.stderr.strip().splitlines()[-1]
    assert not os.path.exists(tmp_path / "out")


def test_the_optimizer_arms_are_made_only_when_named_and_in_one_order():
    assert list(generalisation.build_arms(0.99, 0.1, 0.2, 1.0, "flip")) == [
        "baseline", "ema", "label_smoothing", "mixup_cutmix", "tta", "temperature"]
    arms = generalisation.build_arms(0.99, 0.1, 0.2, 1.0, "flip", 0.05, 0.2, chosen=("sgd", "weight_decay"))
    assert list(arms) == ["baseline", "weight_decay", "sgd"]
    assert arms["weight_decay"].flags == ("--weight-decay", "0.05") and arms["weight_decay"].kind == "train"
    assert arms["sgd"].flags == ("--optimizer", "sgd", "--learning-rate", "0.2")
    assert arms["sgd"].label == "--optimizer sgd --learning-rate 0.2"


def test_the_plain_run_may_keep_its_rate_beside_the_sgd_arm():
    from scripts.measure_generalisation import _parse, build_parser
    args, task, job_argv = _parse(build_parser(), ["--task", "fashion", "--output", "/o", "--arms", "sgd,weight_decay",
                                                   "--learning-rate", "0.002", "--weight-decay", "0.1"])
    assert (args.arms, args.weight_decay, args.sgd_rate) == (("sgd", "weight_decay"), 0.1, None)  # (its default)
    assert job_argv == ["--learning-rate", "0.002"]  # the sgd arm's --learning-rate comes after it, and wins


def test_the_job_settings_compared_are_the_flags_given_in_any_order():
    """The measurement compared the job's whole parsed namespace: defaults that depend on HOME or on a flag added
    since were taken for other flags."""
    from pipeline.flags import build_parser as build_job_parser
    from pipeline.tasks.registry import TASKS
    from scripts.measure_generalisation import given_settings
    parser = build_job_parser(TASKS["fashion"])
    given = given_settings(parser, ["--batch-size", "16", "--max-steps", "300"])
    assert given == {"batch_size": "16", "max_steps": "300"}
    assert given_settings(parser, ["--max-steps=300", "--batch-size", "16"]) == given
    assert given_settings(parser, ["--max-steps", "30", "--batch-size", "16"]) != given
