"""The benchmark's command line: sweep flags here, the job's flags (--data-dir, --image-size,
--warm-up-steps, ...) passed on to the job's own parser."""
import argparse
import contextlib
import datetime
import os
import sys
import tempfile

import benchmark
from acquisition.files import present
from models import PRECISIONS
from pipeline.cli import run_command, set_tensorflow_environment
from pipeline.flag_types import fraction, positive_float, positive_int
from pipeline.flags.devices import MAX_CPU_REPLICAS
from pipeline.signals import Interrupted, stop_at_once
from pipeline.flags import build_parser
from pipeline.tasks.registry import TASKS, parse_tool_args, tool_parser


def int_list(text):
    """argparse type: comma-separated positive integers."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated whole numbers, got {text!r}") from None
    if not values or min(values) <= 0:
        raise argparse.ArgumentTypeError(f"expected numbers greater than 0, got {text!r}")
    _check_distinct(values)
    return values


def _check_distinct(values):
    repeated = sorted({str(v) for v in values if values.count(v) > 1})
    if repeated:  # each would be swept again, doubling the run for no figure
        raise argparse.ArgumentTypeError(f"{', '.join(repeated)} given more than once; name each value once")


def choice_list(choices):
    """argparse type: a comma-separated subset of `choices`."""
    def parse(text):
        values = [v.strip() for v in text.split(",") if v.strip()]
        unknown = [v for v in values if v not in choices]
        if unknown or not values:
            raise argparse.ArgumentTypeError(f"unknown {', '.join(unknown) or 'empty list'}; "
                                             f"choose from {', '.join(choices)}")
        _check_distinct(values)
        return values
    return parse


def build_benchmark_parser():
    """Returns the parser of the sweep flags."""
    parser = tool_parser("Measure training throughput over replicas, batch sizes, data sources and engines "
                         "(or the input pipeline alone, or the time to a validation accuracy) and write "
                         "results.csv, results.json, report.md and plots.",
                         task_help="which job to measure")
    devices = parser.add_mutually_exclusive_group()
    devices.add_argument("--gpus", type=int_list, help="GPU counts to sweep, e.g. 1,2,4")
    devices.add_argument("--cpu-replicas", type=int_list, help="logical CPU replica counts to sweep (no GPU)")
    parser.add_argument("--batch-size", type=int_list, default=None,
                        help="per-replica batch sizes to sweep (default: the job's batch size)")
    parser.add_argument("--engines", type=choice_list(benchmark.ENGINES), default=None,
                        help="'estimator' (this pipeline), 'keras' (model.fit), 'custom_loop' (a tf.function step "
                             "with strategy.run over a distributed dataset) and 'limit' (that step on one batch "
                             "held in memory): same model, optimizer, input and global batch. Default: all; "
                             "with --target-accuracy the Estimator only")
    parser.add_argument("--precision", type=choice_list(tuple(PRECISIONS)), default=["fp32"],
                        help="precisions to sweep, e.g. fp32,bf16 (see train_fashion.py --help)")
    parser.add_argument("--data", type=choice_list(benchmark.DATA_SOURCES), default=None,
                        help="'real' (file-pattern input_fn) and/or 'synthetic' (generated, same shapes). Default: "
                             "both; with --target-accuracy real only")
    parser.add_argument("--input-only", action="store_true",
                        help="time the input pipelines alone, with no model (see --variants)")
    parser.add_argument("--variants", type=str, default=None,
                        help="input-only variants, comma-separated; default all of the task's: "
                             + "; ".join(f"{t.name}: {', '.join(t.input_variants)}" for t in TASKS.values()))
    parser.add_argument("--tiny-model", action="store_true",
                        help="train a trivially small model (Flatten + one Dense layer) on the job's input instead "
                             "of the job's model: each engine's time per step beyond the limit's is then its host "
                             "work per step (see docs/benchmarks.md, GPU figures)")
    parser.add_argument("--target-accuracy", type=fraction, default=None,
                        help="time to accuracy (MLPerf's measure) instead of throughput: each configuration trains "
                             "as the run loop does, on real data with its validation split, from its start until "
                             "validation accuracy first reaches this; the job's --epochs/--max-steps is the budget "
                             "(and --time-budget), --eval-every-epochs (default 1, exact)/--eval-every-steps the "
                             "cadence, --seed + the repeat each repeat's seed")
    parser.add_argument("--time-budget", type=positive_float, default=None,
                        help="with --target-accuracy: seconds after which a configuration stops, not reached")
    parser.add_argument("--timed-steps", type=positive_int, default=20, help="timed steps of each measurement")
    parser.add_argument("--repeats", type=positive_int, default=3, help="times the whole sweep runs, interleaved")
    parser.add_argument("--output", default=None,
                        help="folder for the outputs (default: runs/benchmark/<UTC date and time>); checked before "
                             "the first measurement: a folder that holds an earlier benchmark's results is refused")
    return parser


def main(argv=None):
    """Runs the benchmark command line; returns the exit code."""
    return run_command(build_benchmark_parser(), lambda parsed: _benchmark(*parsed), argv, parse=parse_args)


def parse_args(parser, argv):
    """Returns (sweep args, task, the task's args, input-only variants or None)."""
    args, task, task_args = parse_tool_args(parser, argv)
    variants = None
    if args.input_only:
        try:
            known = task.input_variants
            variants = choice_list(known)(args.variants or ",".join(known))
        except argparse.ArgumentTypeError as e:
            parser.error(f"argument --variants: {e}")
    if args.cpu_replicas and max(args.cpu_replicas) > MAX_CPU_REPLICAS:
        parser.error(f"argument --cpu-replicas: at most {MAX_CPU_REPLICAS} logical CPU devices, got "
                     f"{max(args.cpu_replicas)}")
    if args.input_only and args.tiny_model:
        parser.error("argument --tiny-model: --input-only measures no model; use one or the other")
    for flag in ("engines", "data"):
        if args.input_only and getattr(args, flag):
            parser.error(f"argument --{flag}: --input-only trains no model; use one or the other")
    if args.variants and not args.input_only:
        parser.error("argument --variants: it names --input-only's input variants; give --input-only too")
    _refuse_untimed_flags(parser, task, task_args, args.target_accuracy is not None)
    if args.target_accuracy is None:
        if args.time_budget is not None:
            parser.error("argument --time-budget: it bounds --target-accuracy's runs; give --target-accuracy too")
        args.engines = args.engines or list(benchmark.ENGINES)
        args.data = args.data or list(benchmark.DATA_SOURCES)
    else:
        _check_time_to_accuracy(parser, args, task_args)
    args.output = args.output or os.path.join(
        "runs", "benchmark", datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S"))
    _check_output(parser, args.output)
    # --xla, and the GPUs swept (all CPU replicas without --gpus)
    set_tensorflow_environment(task_args, gpus=max(args.gpus) if args.gpus else None,
                               cpu_replicas=None if args.gpus else max(args.cpu_replicas or [1]))
    return args, task, task_args, variants


# The job's flags a benchmark never applies: what a run does after training (both modes), and what the
# run loop's model_fn adds to the model's step (a throughput sweep times the Keras model's own step).
AFTER_TRAINING = ("eval_only", "tflite", "calibrate", "tta")
RUN_LOOP_ONLY = ("ema", "mixup", "cutmix", "label_smoothing", "class_weight", "init_from")


def _refuse_untimed_flags(parser, task, task_args, run_loop):
    """Exits 2 for a job flag given to the benchmark that would not change what it measures (AFTER_TRAINING;
    RUN_LOOP_ONLY too unless `run_loop`: --target-accuracy trains through the run loop)."""
    job_parser = build_parser(task)
    for dest in AFTER_TRAINING + (() if run_loop else RUN_LOOP_ONLY):
        if hasattr(task_args, dest) and getattr(task_args, dest) != job_parser.get_default(dest):
            flag = f"--{dest.replace('_', '-')}"
            why = ("acts after training, which the benchmark does not reach" if dest in AFTER_TRAINING else
                   "is the run loop's, and a throughput sweep times the model's own training step (--target-accuracy "
                   "trains through the run loop)")
            parser.error(f"argument {flag}: {flag} {why}; leave it out")


OUTPUT_FILES = ("results.json", "results.csv", "report.md", "throughput.png", "mfu.png", "time.png", "input.png",
                "time_to_accuracy.png")  # what a benchmark writes into its --output


def _check_output(parser, folder):
    """Tries the output folder before anything is measured, so that a sweep never ends unable to write:
    exit 2 for a file or a folder holding a file of a benchmark's outputs (OUTPUT_FILES: an earlier benchmark's,
    a training run's results.json, a user's report.md), which would be overwritten, exit 1 for one that cannot be
    made or written."""
    if os.path.exists(folder) and not os.path.isdir(folder):
        parser.error(f"argument --output: {folder} is a file; pass a folder")
    there = present(folder, OUTPUT_FILES)
    if there:
        parser.error(f"argument --output: {folder} holds a {there[0]} (an earlier benchmark's, or another's), which "
                     "would be overwritten; pass another --output, or move it away")
    made, path = [], os.path.abspath(folder)
    while not os.path.exists(path) and path != os.path.dirname(path):
        made.append(path)
        path = os.path.dirname(path)
    try:
        os.makedirs(folder, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
        for path in made:  # made again with the outputs: a sweep that fails on its data leaves no empty folder
            os.rmdir(path)
    except OSError as e:
        parser.exit(1, f"{parser.prog}: error: cannot write the outputs to --output {folder}: {e.strerror or e}; "
                       "pass another --output\n")


def _check_time_to_accuracy(parser, args, task_args):
    """Refuses what --target-accuracy cannot time (exit 2) and sets its engine and data source."""
    if args.input_only:
        parser.error("argument --target-accuracy: --input-only trains no model; use one or the other")
    if args.engines not in (None, ["estimator"]):
        parser.error("argument --engines: --target-accuracy times the Estimator pipeline (the run loop's "
                     "validation); leave --engines out or pass estimator")
    if task_args.synthetic or args.data not in (None, ["real"]):
        parser.error("argument --data: synthetic data has no accuracy to reach; --target-accuracy trains on real "
                     "data (leave --data and --synthetic out)")
    if not task_args.validation_fraction and not task_args.validation_dir:
        parser.error("argument --target-accuracy: it is measured on the validation split; give "
                     "--validation-fraction above 0 (or --validation-dir)")
    args.engines, args.data = ["estimator"], ["real"]


def _benchmark(args, task, task_args, variants):
    import tensorflow as tf  # only once the arguments are known good
    from benchmark import report as report_lib, sweep
    from cluster.lifeline import follow_launcher
    from benchmark.tiny_model import TinyModelTask
    from pipeline.logs import configure_logging
    from pipeline.machine import describe_cpu, describe_gpus

    configure_logging(task_args.verbose)
    follow_launcher()  # started by a tool that holds a lifeline (profile_kernels.py): end with it
    if args.tiny_model:
        task = TinyModelTask(task)
    use_gpus = args.gpus is not None
    batch_sizes = args.batch_size or [task_args.batch_size]
    replica_counts = [1] if args.input_only else (args.gpus or args.cpu_replicas or [1])
    plans = sweep.build_plans(replica_counts, use_gpus, task_args.strategy)
    configs = sweep.plan_configs(args.engines, args.data, replica_counts, batch_sizes, variants, args.precision)
    devices = sorted({d for p in plans.values() for d in p.devices})
    gpus = describe_gpus()
    machine = (f"TF {tf.__version__}, CPU {describe_cpu()}{', GPUs ' + '; '.join(gpus) if gpus else ', no GPU'}; "
               f"{task_args.strategy} over {', '.join(devices)}")
    if args.target_accuracy is not None:
        return _time_to_accuracy(args, task, task_args, plans, configs, machine)
    header = (f"{task.name}, {'input only' if variants else 'training'}, {machine}; {len(configs)} configurations "
              f"x {args.repeats} repeats, {task_args.warm_up_steps} warm-up + {args.timed_steps} timed steps each")
    print(f"benchmark: {header}", flush=True)
    rows = []
    with _kept_if_stopped(rows, len(configs) * args.repeats, args.output, header, report_lib.write_tables,
                          report_lib.COLUMNS):
        sweep.run_sweep(task, task_args, configs, plans, args.repeats, task_args.warm_up_steps,
                        args.timed_steps, log=lambda line: print(line, flush=True), rows=rows)
    report = report_lib.write_outputs(rows, args.output, header)
    print(report)
    print(f"outputs: {os.path.abspath(args.output)} (results.csv, results.json, report.md, plots)")


@contextlib.contextmanager
def _kept_if_stopped(rows, planned, out_dir, header, write_tables, columns):
    """Writes the `rows` measured so far (results.csv and results.json, their header saying how many of
    `planned`; no report or plots, which compare whole repeats) into `out_dir` when the block is stopped
    by a signal (Ctrl-C, SIGTERM), then lets the stop end the tool. A stop that came out as another error (one
    inside Python code TensorFlow called, Keras' tracing say: see pipeline.signals.stop_at_once) is the stop."""
    try:
        with stop_at_once():
            yield
    except (KeyboardInterrupt, Interrupted):
        if rows:
            stopped = f"{header}; STOPPED after {len(rows)} of {planned} measurements"
            write_tables(rows, out_dir, stopped, columns, f"# Benchmark (stopped)\n\n{stopped}\n\nresults.csv holds "
                                                          "the measurements made; no comparison is drawn from them.\n")
            print(f"stopped: the {len(rows)} of {planned} measurements made are in {os.path.abspath(out_dir)} "
                  "(results.csv, results.json)", file=sys.stderr, flush=True)
        raise


def _time_to_accuracy(args, task, task_args, plans, configs, machine):
    from benchmark import accuracy_report, time_to_accuracy

    budget = (f"--max-steps {task_args.max_steps}" if task_args.max_steps else f"--epochs {task_args.epochs:g}") + \
        (f" or {args.time_budget:g} s" if args.time_budget else "")
    seed = task_args.seed or 0
    header = (f"{task.name}, time to validation accuracy {args.target_accuracy:g}, {machine}; "
              f"{len(configs)} configurations x {args.repeats} "
              f"repeats (seeds {seed}..{seed + args.repeats - 1}), budget {budget} each; "
              f"load average {os.getloadavg()[0]:.1f} at the start")
    print(f"benchmark: {header}", flush=True)
    rows = []
    with _kept_if_stopped(rows, len(configs) * args.repeats, args.output, header, accuracy_report.write_tables,
                          accuracy_report.COLUMNS):
        time_to_accuracy.run_sweep(task, task_args, configs, plans, args.repeats, args.target_accuracy,
                                   args.time_budget, log=lambda line: print(line, flush=True), rows=rows)
    report = accuracy_report.write_outputs(rows, args.output, header)
    print(report)
    print(f"outputs: {os.path.abspath(args.output)} (results.csv, results.json, report.md, time_to_accuracy.png, "
          "accuracy.png)")
