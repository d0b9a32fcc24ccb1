"""The inspect_input command line: the task's own data flags, plus what to look at."""
import argparse
import json
import os
import sys

from inspection.sheet import is_contact_sheet
from pipeline.cli import run_command
from pipeline.flag_types import positive_int
from pipeline.tasks.registry import parse_tool_args, tool_parser
from reporting.fonts import named_by_index


def build_inspect_parser():
    """Returns the parser of the inspection flags; the task's flags are parsed by its own parser."""
    parser = tool_parser("Show what a job's training input pipeline feeds the model: class counts per batch, "
                         "the class mix against the dataset's, images/sec and a contact sheet of the first batch.",
                         task_help="which job's input to inspect")
    parser.add_argument("--batches", type=positive_int, default=10, help="batches to read")
    parser.add_argument("--workers", type=positive_int, default=1,
                        help="input pipelines (cluster workers) the files are shared between")
    parser.add_argument("--worker-index", type=int, default=0, help="which worker's share to read (from 0)")
    parser.add_argument("--sheet", type=png_path, default=None,
                        help="write a PNG contact sheet of the first batch to this .png file")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    return parser


def png_path(text):
    """argparse type: a path ending in .png that is not a folder, nor a file but a contact sheet written before."""
    if not text.lower().endswith(".png"):
        raise argparse.ArgumentTypeError(f"expected a file name ending in .png, got {text!r}")
    if os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text} is a folder; give a file name ending in .png")
    if os.path.lexists(text) and not is_contact_sheet(text):
        raise argparse.ArgumentTypeError(f"{text} is there and is not a contact sheet of this tool's, so it is not "
                                         "written over; give a new file name")
    return text


def main(argv=None):
    """Runs the inspect_input command line; returns the exit code."""
    return run_command(build_inspect_parser(), lambda parsed: _inspect(*parsed), argv, parse=_parse)


def _parse(parser, argv):
    args, task, task_args = parse_tool_args(parser, argv)
    if not 0 <= args.worker_index < args.workers:
        parser.error(f"--worker-index {args.worker_index} must be from 0 to --workers - 1 ({args.workers - 1})")
    # Applied inside the model, to each step's batch: the input pipeline this tool reads never shows them.
    shown_nowhere = [flag for flag, name in (("--augment", "augment"), ("--mixup", "mixup"), ("--cutmix", "cutmix"),
                                             ("--label-smoothing", "label_smoothing"))
                     if getattr(task_args, name, None)]
    if shown_nowhere:
        parser.error(f"argument {shown_nowhere[0]}: applied inside the model to each step's batch, after the input "
                     "pipeline this tool shows; leave it out (the batches and the sheet are the same without it)")
    return args, task, task_args


def _inspect(args, task, task_args):
    from inspection import input_report  # imports TensorFlow: only once the arguments are known good
    from pipeline.logs import configure_logging

    configure_logging(task_args.verbose)
    data = task.prepare_data(task_args, task_args.batch_size)
    batch_size = data.recipe_values.get("batch_size", task_args.batch_size)  # (the shipped sample's recipe, say)
    report = input_report.inspect_batches(data.train_input_fn, args.batches, len(data.class_names),
                                          input_report.input_context(args.workers, args.worker_index),
                                          log=lambda line: print(line, file=sys.stderr, flush=True))
    report.update(input_report.class_mix(report["class_counts_per_batch"], data.train_class_counts))
    if args.sheet:
        os.makedirs(os.path.dirname(os.path.abspath(args.sheet)), exist_ok=True)
        input_report.write_contact_sheet(report["first_images"], report["first_labels"], data.class_names,
                                         args.sheet)
    first_labels, stopped = report.pop("first_labels"), report.pop("stopped")
    report.pop("first_images")
    report.update(task=task.name, data_source=data.source, class_names=list(data.class_names),
                  batch_size=batch_size, workers=args.workers, worker_index=args.worker_index,
                  train_examples=data.num_train_examples, first_batch_labels=first_labels.tolist(),
                  sheet=os.path.abspath(args.sheet) if args.sheet else None,
                  batches_asked=args.batches, stopped_early=stopped is not None)
    if args.json:
        print(json.dumps(report), flush=True)
    else:
        header = (f"{task.name}: training input of {data.source} data ({data.num_train_examples} images), "
                  f"batch {batch_size}, worker {args.worker_index + 1} of {args.workers}")
        if stopped is not None:
            header += f"; STOPPED after {len(report['class_counts_per_batch'])} of {args.batches} batches"
        print(input_report.format_report(report, data.class_names, header))
        if args.sheet:
            by_index = named_by_index(data.class_names)
            print(f"contact sheet of the first batch: {report['sheet']}"
                  f"{' (labelled by index: ' + ', '.join(by_index) + ')' if by_index else ''}", flush=True)
    if stopped is not None:  # shown, then the stop ends the tool (its line, 128 + the signal)
        raise stopped
    return 0
