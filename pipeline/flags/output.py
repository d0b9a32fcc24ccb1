"""The flags of what a run writes: checkpoints, summaries, logs and hooks, and the test report. Nothing here imports TensorFlow."""
import hooks
from pipeline.flags.tta import add_tta_flag
from pipeline.flag_types import RecordedStore, checkpoint_folder, fraction, hook_names, int_in_range, name_list, \
    non_negative_int, positive_int


def add_output_flags(parser, task):
    """Adds the checkpoints-and-logs group, with `task`'s default model dir; returns it."""
    d = task.defaults
    output = parser.add_argument_group("checkpoints and logs")
    output.add_argument("--model-dir", default=d["model_dir"], type=checkpoint_folder,
                        help="checkpoints, TensorBoard summaries and results.json; "
                             "a run with an existing model dir resumes from its latest checkpoint")
    output.add_argument("--checkpoint-steps", type=positive_int, default=500,
                        help="save a checkpoint at every multiple of N global steps, counted from step 0 "
                             "across resumes (and at the end, and at each step a validation is due)")
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
    return output


MIN_RESAMPLES = 10


def add_report_flags(parser, task):
    """Adds the test-report group, with `task`'s positive classes; returns it."""
    d = task.defaults
    report = parser.add_argument_group("test report")
    report.add_argument("--positive-classes", type=name_list, default=d.get("positive_classes"), action=RecordedStore,
                        metavar="NAME,NAME",
                        help="classes that make up the referral decision reported against all others "
                             "(sensitivity, specificity and ROC AUC of their summed probability); "
                             "'none' (or no default) reports no referral decision; a class whose name has a "
                             "comma, or is none, in double quotes: '\"none\",CNV'")
    report.add_argument("--at-specificity", type=fraction, default=0.95, action=RecordedStore,
                        help="the referral decision's operating point: the highest sensitivity among the "
                             "thresholds whose specificity is at least this, chosen on the validation split "
                             "(and on the test split, to compare)")
    report.add_argument("--calibrate", choices=("none", "temperature"), default="none",
                        help="temperature: fit one temperature on the validation split by minimising its NLL, "
                             "report the test split's probabilities scaled by it, and export the model again "
                             "serving them")
    report.add_argument("--bootstrap-resamples", type=int_in_range(MIN_RESAMPLES, 1_000_000), default=1000,
                        help=f"resamples of the percentile bootstrap behind the report's 95%% intervals (at least "
                             f"{MIN_RESAMPLES}: fewer put the interval's ends on one or two resamples, which can "
                             "leave out the figure itself)")
    report.add_argument("--bootstrap-seed", type=int_in_range(0, 2 ** 31 - 1), default=0,
                        help="seed of the bootstrap's resampling")
    add_tta_flag(report, task)
    return report
