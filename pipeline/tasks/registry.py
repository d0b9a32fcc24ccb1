"""Every job by name, and the command line of the tools that work on one job (--task NAME)."""

from pipeline.flags import build_parser
from pipeline.flag_types import ArgumentParser, HelpFormatter
from pipeline.tasks import fashion, images, oct as oct_task

TASKS = {task.name: task for task in (fashion.TASK, oct_task.TASK, images.TASK)}


def tool_parser(description, task_help):
    """Returns the parser of a tool that works on one job: its own flags are added to it, and
    the flags it does not know go to the job's own parser (see parse_tool_args)."""
    parser = ArgumentParser(
        description=f"{description} Flags not listed here are the job's own (e.g. --data-dir, --image-size, "
                    "--synthetic, --batch-size, and the OCT job's --cache and --records-dir); see "
                    "train_fashion.py, train_oct.py or train_images.py --help.",
        formatter_class=HelpFormatter)
    parser.add_argument("--task", choices=sorted(TASKS), required=True, help=task_help)
    return parser


def parse_tool_args(parser, argv=None):
    """Returns (the tool's args, the task, the task's args) from `argv`."""
    args, task_argv = parser.parse_known_args(argv)
    task = TASKS[args.task]
    job_parser = build_parser(task)
    job_parser.also_known = parser  # a misspelt flag of the tool's ends here
    return args, task, job_parser.parse_args(task_argv)
