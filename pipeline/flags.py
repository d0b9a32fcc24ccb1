"""The command-line flags every training job shares, defined once.

A task supplies its defaults (batch size, epochs, learning rate, ...) and may
add flags of its own; `build_parser` returns the parser for its script. Nothing
here imports TensorFlow, so `--help` and a bad flag answer at once.
"""
import argparse

import hooks
from input_fns import AUGMENTATIONS, FLIP_DIRECTIONS
from models import LR_SCHEDULES, PRECISIONS
from pipeline import batching

STRATEGIES = ("mirrored", "central_storage", "multi_worker_mirrored", "parameter_server")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows each flag's default, except where there is none to show (None, or off for a switch):
    such flags say in their help what happens without them."""

    def _get_help_string(self, action):
        if action.default is None or action.default is False:
            return action.help
        return super()._get_help_string(action)


def positive_int(text):
    """argparse type: an integer > 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0, got {value}")
    return value


def non_negative_int(text):
    """argparse type: an integer >= 0."""
    value = int(text) if text.lstrip("-").isdigit() else None
    if value is None or value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return value


def _finite_float(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
    return value


def positive_float(text):
    """argparse type: a finite number > 0."""
    value = _finite_float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a finite number greater than 0, got {text}")
    return value


def non_negative_float(text):
    """argparse type: a finite number >= 0."""
    value = _finite_float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return value


def int_in_range(low, high):
    """Returns an argparse type: a whole number from `low` to `high`."""
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be from {low} to {high}, got {value}")
        return value
    return parse


def fraction(text):
    """argparse type: a number from 0 to 1."""
    value = _finite_float(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be from 0 to 1, got {text}")
    return value


def open_fraction(text):
    """argparse type: a number greater than 0 and less than 1 (a decay)."""
    value = _finite_float(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be greater than 0 and less than 1, got {text}")
    return value


def name_list(text):
    """argparse type: a comma-separated list of names (classes, say), none empty; returns a tuple,
    or None for 'none'."""
    if text.strip().lower() == "none":
        return None
    names = tuple(n.strip() for n in text.split(","))
    if not text.strip() or not all(names):
        raise argparse.ArgumentTypeError(f"expected comma-separated names such as CNV,DME, got {text!r}")
    return names


def hook_names(text):
    """argparse type: a comma-separated list of hook names from the hooks registry."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in hooks.HOOKS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown hook {', '.join(unknown)}; known hooks: {', '.join(sorted(hooks.HOOKS))}")
    return names


# The largest value each numeric transform takes: degrees for rotate, fractions for the rest.
_AUGMENT_LIMITS = {"rotate": 180.0, "zoom": 0.9, "translate": 1.0, "contrast": 0.9}


def augment_list(defaults, forbidden):
    """Returns an argparse type for --augment: 'none', or transforms such as
    'flip,rotate=10,zoom=0.1' parsed to [(name, value)]; a name alone takes its value from
    `defaults`, and what `forbidden` names ('name' or 'name=value': the reason) is refused."""
    def parse(text):
        if text.strip() == "none":
            return []
        transforms = []
        for item in text.split(","):
            name, _, value = (part.strip() for part in item.partition("="))
            if name not in AUGMENTATIONS:
                raise argparse.ArgumentTypeError(f"unknown transform {name!r}; known: {', '.join(AUGMENTATIONS)}, "
                                                 "or 'none'")
            if any(name == seen for seen, _ in transforms):
                raise argparse.ArgumentTypeError(f"{name} is given twice")
            value = _transform_value(name, value or defaults[name])
            reason = forbidden.get(name) or forbidden.get(f"{name}={value}")
            if reason:
                raise argparse.ArgumentTypeError(f"{name}={value} is not allowed for this job: {reason}")
            transforms.append((name, value))
        return transforms
    return parse


def _transform_value(name, value):
    if name == "flip":
        if value not in FLIP_DIRECTIONS:
            raise argparse.ArgumentTypeError(f"flip={value}: expected one of {', '.join(FLIP_DIRECTIONS)}")
        return value
    try:
        number = _finite_float(str(value))
    except argparse.ArgumentTypeError as e:
        raise argparse.ArgumentTypeError(f"{name}={value}: {e}") from None
    if not 0 < number <= _AUGMENT_LIMITS[name]:
        raise argparse.ArgumentTypeError(f"{name}={value}: must be greater than 0 and at most "
                                         f"{_AUGMENT_LIMITS[name]:g}")
    return number


class RecordedStore(argparse.Action):
    """Stores a flag's value, as argparse's default action does, and adds its dest to
    `args.explicit_flags`: what the user set on the command line, even to the default's value."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        namespace.explicit_flags = frozenset(getattr(namespace, "explicit_flags", ())) | {self.dest}


def add_data_dir_flag(parser, default):
    """Adds --data-dir, the dataset's folder, with `default`."""
    parser.add_argument("--data-dir", default=default,
                        help="folder holding the dataset (downloaded there when absent)")


def build_parser(task):
    """Returns the argument parser for `task`: the shared flags with the task's defaults."""
    d = task.defaults
    parser = argparse.ArgumentParser(
        description=task.description,
        formatter_class=HelpFormatter)

    data = parser.add_argument_group("data")
    add_data_dir_flag(data, d["data_dir"])
    data.add_argument("--synthetic", action="store_true",
                      help="train and evaluate on generated data of the dataset's shapes (no download): one "
                           "random batch repeated, so accuracy can reach 1.0; for smoke runs and benchmarks")

    train = parser.add_argument_group("training")
    train.add_argument("--batch-size", action=RecordedStore, type=positive_int, default=d["batch_size"],
                       help="images per replica per step; the global batch is this times the replicas")
    length = train.add_mutually_exclusive_group()
    length.add_argument("--epochs", action=RecordedStore, type=positive_float, default=d["epochs"],
                        help="passes over the training set, turned into a final global step")
    length.add_argument("--max-steps", action=RecordedStore, type=positive_int, default=None,
                        help="final global step, instead of --epochs (give one or the other); a resumed run stops "
                            "exactly there")
    train.add_argument("--learning-rate", action=RecordedStore, type=positive_float, default=d["learning_rate"],
                       help="learning rate at --reference-batch-size global images per step")
    train.add_argument("--lr-scaling", action=RecordedStore, choices=batching.LR_SCALING_RULES, default="linear",
                       help="'linear' multiplies the learning rate by global batch / reference batch; "
                            "'none' uses --learning-rate as it is")
    train.add_argument("--reference-batch-size", type=positive_int, default=d["reference_batch_size"],
                       help="global batch at which --learning-rate was tuned")
    train.add_argument("--lr-schedule", choices=LR_SCHEDULES, default="constant",
                       help="the rate over training: 'constant', 'cosine' decay to 0 at the final step, or 'step' "
                            "decay (x0.1 at half and three quarters of the final step)")
    train.add_argument("--warm-up-epochs", type=non_negative_float, default=0.0,
                       help="epochs over which the rate rises linearly to its full value first (Goyal et al.; "
                            "for large global batches)")
    train.add_argument("--seed", type=int_in_range(0, 2 ** 31 - 1), default=None,
                       help="random seed for weights, shuffling and --augment's draws (0 for those without it)")
    train.add_argument("--deterministic", action="store_true",
                       help="reproduce the run bit for bit from --seed (0 without it): TensorFlow's op determinism, "
                            "a deterministic input order, and a resumed run's input going on where its checkpoint "
                            "stood (slower: see docs/benchmarks.md)")
    train.add_argument("--augment", type=augment_list(task.augment_defaults, task.augment_forbidden),
                       default="none", metavar="none|TRANSFORM[=VALUE],...",
                       help="random transforms of each training batch, never of evaluation or the export: "
                            f"{', '.join(AUGMENTATIONS)} (flip=horizontal|vertical|both; rotate in degrees; zoom, "
                            "translate and contrast as fractions), e.g. 'flip,rotate=10,zoom=0.1'; a name alone "
                            "takes the job's value: " + ", ".join(f"{k}={v:g}" if not isinstance(v, str) else
                                                                  f"{k}={v}" for k, v in task.augment_defaults.items()))
    train.add_argument("--ema", type=open_fraction, default=None, metavar="DECAY",
                       help="keep an exponential moving average of the weights (after each step: average = DECAY x "
                            "average + (1 - DECAY) x weights, from the starting weights; e.g. 0.999), checkpointed "
                            "with them; validation, the best model, the test figures and the export use it, and "
                            "results.json compares it with the raw weights (docs/validation.md)")

    devices = parser.add_argument_group("devices")
    devices.add_argument("--gpus", type=non_negative_int, default=None,
                         help="mirror training over the first N GPUs (NCCL all-reduce); "
                              "default: every visible GPU, or the CPU when there is none")
    devices.add_argument("--cpu-replicas", type=positive_int, default=None,
                         help="mirror training over N logical CPU devices instead of GPUs "
                              "(tests the multi-replica path without a GPU)")

    devices.add_argument("--strategy", choices=STRATEGIES, default="mirrored",
                         help="one machine: 'mirrored' (a copy of the variables on each replica) or "
                              "'central_storage' (variables on the CPU, compute mirrored over the replicas); "
                              "'multi_worker_mirrored' (synchronous) or 'parameter_server' (asynchronous): the "
                              "cluster that TF_CONFIG describes (see scripts/launch_local_cluster.py)")
    devices.add_argument("--precision", choices=tuple(PRECISIONS), default="fp32",
                         help="'fp32'; or mixed precision, variables in float32 and math in 'bf16' (CPUs with "
                              "AVX512_BF16 or AMX, GPUs from compute capability 8.0) or 'fp16' (GPUs, with "
                              "dynamic loss scaling); the softmax and the loss stay float32")
    devices.add_argument("--xla", action="store_true",
                         help="compile the training graph with XLA (often faster on GPUs; slower on the CPUs "
                              "measured, see docs/benchmarks.md)")
    devices.add_argument("--intra-op-threads", type=non_negative_int, default=0,
                         help="threads one operation may use (0: TensorFlow's choice, the cores)")
    devices.add_argument("--inter-op-threads", type=non_negative_int, default=0,
                         help="operations run at once (0: TensorFlow's choice)")
    devices.add_argument("--cluster-wait-secs", type=positive_int, default=600,
                         help="in a cluster: give up, with one line naming the tasks that do not answer, when "
                              "training has not started after this long")
    devices.add_argument("--peer-timeout-secs", type=int_in_range(5, 120), default=60,
                         help="in a cluster: a task whose peer stays killed or silent (stopped, cut off) this long "
                              "ends with one line and exit 200, which schedulers retry; relaunch every task "
                              "to resume")
    devices.add_argument("--cluster", choices=("tf_config", "slurm"), default="tf_config",
                         help="where the cluster comes from: the TF_CONFIG variable, or 'slurm': the srun job step "
                              "(rank 0 the chief, then --slurm-ps parameter servers, the rest workers)")
    devices.add_argument("--slurm-port-base", type=int_in_range(1024, 65000), default=8888,
                         help="with --cluster slurm: the first task on each node listens on this port, the next "
                              "on the one above, ...")
    devices.add_argument("--slurm-ps", type=non_negative_int, default=0,
                         help="with --cluster slurm: how many tasks, after the chief, are parameter servers")
    devices.add_argument("--eval-throttle-secs", type=positive_int, default=10,
                         help="in a cluster with an evaluator task: least seconds between its evaluations")

    output = parser.add_argument_group("checkpoints and logs")
    output.add_argument("--model-dir", default=d["model_dir"],
                        help="checkpoints, TensorBoard summaries and results.json; "
                             "a run with an existing model dir resumes from its latest checkpoint")
    output.add_argument("--checkpoint-steps", type=positive_int, default=500,
                        help="save a checkpoint every N global steps (and at the end)")
    output.add_argument("--keep-checkpoints", type=positive_int, default=5,
                        help="number of most recent checkpoints kept")
    output.add_argument("--summary-steps", type=positive_int, default=100,
                        help="write TensorBoard summaries (training loss and accuracy, learning rate, "
                             "images/sec) every N global steps")
    output.add_argument("--log-steps", type=positive_int, default=100,
                        help="log a progress line (step N/M, loss, images/sec, ETA) every N global steps")
    output.add_argument("--hooks", type=hook_names, default=["examples_per_second"],
                        help=f"comma-separated training hooks, from: {', '.join(sorted(hooks.HOOKS))}")
    output.add_argument("--warm-up-steps", type=non_negative_int, default=10,
                        help="first steps left out of the throughput figures")
    output.add_argument("--verbose", action="store_true", help="show all of TensorFlow's log lines")

    report = parser.add_argument_group("test report")
    report.add_argument("--positive-classes", type=name_list, default=d.get("positive_classes"),
                        metavar="NAME,NAME",
                        help="classes that make up the referral decision reported against all others "
                             "(sensitivity, specificity and ROC AUC of their summed probability); "
                             "'none' (or no default) reports no referral decision")
    report.add_argument("--at-specificity", type=fraction, default=0.95,
                        help="the referral decision's operating point: the highest sensitivity among the "
                             "thresholds whose specificity is at least this, chosen on the validation split "
                             "(and on the test split, to compare)")
    report.add_argument("--calibrate", choices=("none", "temperature"), default="none",
                        help="temperature: fit one temperature on the validation split by minimising its NLL, "
                             "report the test split's probabilities scaled by it, and export the model again "
                             "serving them")
    report.add_argument("--bootstrap-resamples", type=positive_int, default=1000,
                        help="resamples of the percentile bootstrap behind the report's 95%% intervals")
    report.add_argument("--bootstrap-seed", type=int_in_range(0, 2 ** 31 - 1), default=0,
                        help="seed of the bootstrap's resampling")

    from pipeline.validation_flags import add_validation_flags  # it reuses this module's argparse types
    add_validation_flags(parser, d)
    task.add_flags(parser)
    parser.set_defaults(explicit_flags=frozenset())  # filled by RecordedStore's flags
    return parser
