"""What weight averaging, label smoothing, mixup/cutmix, test-time augmentation and temperature
scaling (and, when asked, decoupled weight decay and SGD) each do to a job's test accuracy, NLL and ECE,
paired by seed against the job's plain run.

Each seed trains the plain run ('baseline') and one run per training tool through the job's own
command (with --deterministic --seed, so a seed gives every arm the same split, initial weights and
input order), each with --calibrate temperature; test-time augmentation is an --eval-only run of the
baseline's model dir, and temperature scaling reads the baseline's own report after scaling. Every
figure comes from the run's report.json (reporting.calibration's definitions, 15 equal-count bins)."""
import contextlib
import csv
import dataclasses
import datetime
import json
import os
import shutil
import subprocess
import sys

from acquisition import locks
from acquisition.files import present
from benchmark import ARM_SGD_RATE, ARM_WEIGHT_DECAY, DEFAULT_GENERALISATION_ARMS, paired
from cluster.lifeline import held_lifeline
from pipeline.errors import FlagError, TrainingError, UsageError
from pipeline.evaluation_report import EVAL_ONLY_DIR

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
METRICS = (("accuracy", True), ("nll", False), ("ece", False))  # (name, higher is better)
COMMON_FLAGS = ("--deterministic", "--calibrate", "temperature", "--bootstrap-resamples", "100")
PLAN_FILE = "measurement.json"  # the flags the runs under --output train with
LOCK_FILE = ".measurement.lock"  # held by the measurement running in --output
OUTPUT_FILES = ("results.csv", "summary.json", "report.md")  # what it writes over, beside PLAN_FILE


@dataclasses.dataclass(frozen=True)
class Arm:
    """One side of a comparison: `flags` added to a training run ('train'), to an --eval-only run of
    the baseline's model ('evaluate'), or none, the baseline's report read after its temperature
    ('temperature')."""
    name: str
    label: str
    kind: str = "train"
    flags: tuple = ()


def build_arms(ema_decay, label_smoothing, mixup, cutmix, tta, weight_decay=ARM_WEIGHT_DECAY, sgd_rate=ARM_SGD_RATE,
               chosen=DEFAULT_GENERALISATION_ARMS):
    """Returns {name: Arm}: the baseline first, then each of benchmark.GENERALISATION_ARMS that `chosen` names,
    in that order."""
    arms = [Arm("baseline", "plain run"),
            Arm("ema", f"--ema {ema_decay:g}", flags=("--ema", f"{ema_decay:g}")),
            Arm("label_smoothing", f"--label-smoothing {label_smoothing:g}",
                flags=("--label-smoothing", f"{label_smoothing:g}")),
            Arm("mixup_cutmix", f"--mixup {mixup:g} --cutmix {cutmix:g}",
                flags=("--mixup", f"{mixup:g}", "--cutmix", f"{cutmix:g}")),
            Arm("tta", f"--tta {tta}", kind="evaluate", flags=("--tta", tta)),
            Arm("temperature", "--calibrate temperature", kind="temperature"),
            Arm("weight_decay", f"--weight-decay {weight_decay:g}", flags=("--weight-decay", f"{weight_decay:g}")),
            Arm("sgd", f"--optimizer sgd --learning-rate {sgd_rate:g}",
                flags=("--optimizer", "sgd", "--learning-rate", f"{sgd_rate:g}"))]
    return {arm.name: arm for arm in arms if arm.name == "baseline" or arm.name in chosen}


def figures(report, after_temperature=False):
    """Returns {'accuracy', 'nll', 'ece'} of the test split from a report.json made with
    --calibrate temperature: before the scaling, or after it."""
    scaling = report["calibration"]["temperature"]
    side = "after" if after_temperature else "before"
    return {"accuracy": report["accuracy"]["value"], "nll": scaling["test_nll"][side],
            "ece": scaling["test_ece"][side]}


def _run(command, log_path):
    """Runs `command` with its output in `log_path`; raises FlagError when the job refused its flags
    (exit 2), TrainingError on another failure, each naming the log.
    The run holds the read end of a lifeline (cluster.lifeline, which every job follows): if this
    process dies, kill -9 included, the run checkpoints and ends rather than train on unwatched."""
    # From the folder the measurement runs in, as the user's own paths say; a run made again after a stop adds to
    # its log (only one measurement runs in an --output: holding_output).
    with held_lifeline() as (env, lifeline), open(log_path, "a") as log:
        log.write(f"=== {datetime.datetime.now():%Y-%m-%d %H:%M:%S}: {' '.join(command)}\n")
        log.flush()
        code = subprocess.call(command, stdout=log, stderr=subprocess.STDOUT, pass_fds=(lifeline,), env=env)
    if code:
        with open(log_path) as log:
            last = (log.read().strip().splitlines() or ["(no output)"])[-1]
        error = FlagError if code == 2 else TrainingError
        raise error(f"{' '.join(command[1:3])} ... exited {code}: {last} (log: {log_path})")


@contextlib.contextmanager
def holding_output(output):
    """Holds the lock of the folder `output` (made if absent) for the block: one measurement at a time there.
    Raises UsageError naming the one running; a folder this left holding nothing else is removed."""
    made = not os.path.isdir(output)
    os.makedirs(output, exist_ok=True)
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(locks.exclusive_leaving_no_trace(os.path.join(output, LOCK_FILE), made, wait=False))
        except locks.LockHeld as e:
            raise UsageError(f"another measurement ({e.owner}) is running in --output {output}; wait for it to "
                             "finish, or pass another --output") from None
        yield


def claim_output(output, job_argv, arms, job_settings=None):
    """Writes the flags this measurement trains with into `output`/PLAN_FILE, or checks them against the
    ones there: kept reports and model dirs are reused by arm and seed, so a measurement made with
    other flags must not go on in the same folder. The same `job_argv`, or where both plans have them the same
    `job_settings` ({setting: repr of its value}, of the flags given: the same flags in another order), is the
    same job.
    Raises FlagError (exit 2) when they differ, or when `output` holds files of a measurement's names without
    its plan (a user's report.md, say)."""
    plan = {"job_flags": list(job_argv), "arms": {arm.name: list(arm.flags) for arm in arms.values()}}
    if job_settings is not None:
        plan["job_settings"] = dict(job_settings)
    path = os.path.join(output, PLAN_FILE)
    if os.path.exists(path):
        with open(path) as f:
            earlier = json.load(f)
        same_job = earlier.get("job_flags") == plan["job_flags"] or (
            "job_settings" in earlier and earlier["job_settings"] == plan.get("job_settings"))
        if not same_job or earlier.get("arms") != plan["arms"]:
            if not same_job:
                changed = f"the job's flags were '{' '.join(earlier.get('job_flags', []))}', now '{' '.join(job_argv)}'"
            else:
                changed = f"the arms' flags were {earlier.get('arms')}, now {plan['arms']}"
            raise FlagError(f"--output {output} holds a measurement made with other flags: {changed}; pass another "
                            "--output, or the same flags to go on with it")
        return
    there = present(output, OUTPUT_FILES)
    if there:  # not a measurement's (it has no plan): a user's, or another tool's
        raise FlagError(f"--output {output} holds {there[0]}, which no measurement made there and this would "
                        "overwrite; pass another --output, or move it away")
    os.makedirs(output, exist_ok=True)
    with open(path + ".partial", "w") as f:
        json.dump(plan, f, indent=2)
    os.replace(path + ".partial", path)


def run_arm(script, job_argv, arm, seed, output):
    """Returns the report.json of `arm` at `seed` (kept under `output`/reports; a kept one is reused,
    so an interrupted measurement goes on where it stopped)."""
    kept = os.path.join(output, "reports", f"{arm.name}-seed{seed}.json")
    if arm.kind == "temperature":
        kept = os.path.join(output, "reports", f"baseline-seed{seed}.json")
    if os.path.exists(kept):
        with open(kept) as f:
            return json.load(f)
    model_dir = os.path.join(output, "runs", f"{'baseline' if arm.kind == 'evaluate' else arm.name}-seed{seed}")
    command = [sys.executable, os.path.join(ROOT, "scripts", script), *job_argv, *COMMON_FLAGS,
               "--seed", str(seed), "--model-dir", model_dir, *arm.flags]
    if arm.kind == "evaluate":
        command.append("--eval-only")
    os.makedirs(os.path.join(output, "logs"), exist_ok=True)
    _run(command, os.path.join(output, "logs", f"{arm.name}-seed{seed}.log"))
    os.makedirs(os.path.dirname(kept), exist_ok=True)
    written = os.path.join(model_dir, EVAL_ONLY_DIR) if arm.kind == "evaluate" else model_dir
    shutil.copyfile(os.path.join(written, "report.json"), kept + ".partial")
    os.replace(kept + ".partial", kept)
    with open(kept) as f:
        return json.load(f)


def measure(script, job_argv, arms, seeds, output, progress=print):
    """Runs every arm at every seed (the baseline first: the others read its model dir); returns
    rows {'seed', 'arm', 'accuracy', 'nll', 'ece'}."""
    rows = []
    for seed in seeds:
        for arm in arms.values():
            try:
                report = run_arm(script, job_argv, arm, seed, output)
            except FlagError:
                if not os.path.isdir(os.path.join(output, "reports")):  # nothing measured: these flags are free
                    os.remove(os.path.join(output, PLAN_FILE))
                raise
            row = {"seed": seed, "arm": arm.name, **figures(report, arm.kind == "temperature")}
            progress(", ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()))
            rows.append(row)
    return rows


def summarise(rows, arms):
    """Returns {arm: {metric: paired.compare(...)}} of each arm against the baseline, and
    {'baseline': {metric: its values}}, over the seeds both have."""
    values = {}
    for row in rows:
        values.setdefault(row["arm"], {})[row["seed"]] = row
    base = values["baseline"]
    summary = {"baseline": {m: [base[s][m] for s in sorted(base)] for m, _ in METRICS}}
    for name in arms:
        if name == "baseline" or name not in values:
            continue
        seeds = sorted(set(base) & set(values[name]))
        summary[name] = {m: paired.compare([base[s][m] for s in seeds], [values[name][s][m] for s in seeds], higher)
                         for m, higher in METRICS}
    return summary


def _cell(comparison):
    low, high = comparison["ci"] or (float("nan"), float("nan"))
    return (f"{comparison['difference']:+.4f} [{low:+.4f}, {high:+.4f}] p={comparison['p']:.2f} "
            f"({comparison['better']}↑ {comparison['worse']}↓)")


def markdown(summary, arms, header):
    """Returns report.md: the header, then one row per tool (mean difference from the plain run, its
    95% t interval, the sign-flip p, seeds better and worse) and the plain run's means."""
    base = summary["baseline"]
    n = len(base["accuracy"])
    lines = [header, "", f"| tool ({n} seeds, paired) | test accuracy | NLL | ECE |", "|---|---|---|---|",
             "| plain run (mean) | " + " | ".join(f"{sum(base[m]) / n:.4f}" for m, _ in METRICS) + " |"]
    for name, metrics in summary.items():
        if name != "baseline":
            lines.append(f"| {arms[name].label} | " + " | ".join(_cell(metrics[m]) for m, _ in METRICS) + " |")
    lines += ["", "Each cell: the mean over seeds of (tool − plain run) [95% t interval] and the exact two-sided "
              "sign-flip p; ↑ counts the seeds where the tool was better (higher accuracy, lower NLL or ECE)."]
    return "\n".join(lines) + "\n"


def write_outputs(rows, summary, arms, output, header):
    """Writes results.csv (a row per seed and arm), summary.json and report.md into `output`;
    returns report.md's text."""
    with open(os.path.join(output, "results.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["seed", "arm", *(m for m, _ in METRICS)])
        writer.writeheader()
        writer.writerows(rows)
    with open(os.path.join(output, "summary.json"), "w") as f:
        json.dump({"header": header, "written_at": datetime.datetime.now(datetime.timezone.utc).isoformat(
            timespec="seconds"), "summary": summary}, f, indent=2)
    text = markdown(summary, arms, header)
    with open(os.path.join(output, "report.md"), "w") as f:
        f.write(text)
    return text
