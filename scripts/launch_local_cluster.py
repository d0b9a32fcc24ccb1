#!/usr/bin/env python
"""Run a training command as a TF_CONFIG cluster on this machine (127.0.0.1, free ports).

  python scripts/launch_local_cluster.py --workers 2 -- \\
      python scripts/train_fashion.py --strategy multi_worker_mirrored --model-dir runs/cluster

starts a chief and 2 workers, each with its own TF_CONFIG, and prefixes their
output with the task's name. It stops every process it started when one fails,
and exits non-zero when any task failed.

Only this machine can reach the cluster: its tasks share a network namespace of
their own whose only interface is the loopback (TensorFlow's servers accept any
graph from anyone who can connect). So the tasks download nothing: give them
the dataset (--data-dir) and weights (--weights) on disk. Where no namespace can
be made, the launcher names the ports that would be open to the network and runs
only with --allow-network, which also lets the tasks download.

SIGINT (Ctrl-C), SIGTERM and SIGHUP are passed on to every task, which saves a
checkpoint and ends; any still running after --grace-secs gets SIGKILL, and the
launcher exits with 128 + the signal. Should the launcher be killed, its tasks
end within --grace-secs too.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from cluster.isolation import ISOLATED_VARIABLE, isolate_network  # noqa: E402
from cluster.launcher import DEFAULT_GRACE_SECS, LocalCluster  # noqa: E402
from pipeline.cli import run_command  # noqa: E402
from pipeline.errors import UsageError  # noqa: E402
from pipeline.flag_types import ArgumentParser, non_negative_int, positive_float  # noqa: E402


def build_parser():
    """Returns the parser of the launcher's own flags (those before --)."""
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     usage="%(prog)s [--workers N] [--ps N] [--evaluator] [--allow-network] "
                                           "[--grace-secs S] [--log-dir DIR] -- COMMAND ...")
    parser.add_argument("--workers", type=non_negative_int, default=1, help="worker tasks besides the chief")
    parser.add_argument("--ps", type=non_negative_int, default=0,
                        help="parameter-server tasks (needed by --strategy parameter_server)")
    parser.add_argument("--evaluator", action="store_true",
                        help="add an evaluator task that evaluates each new checkpoint")
    parser.add_argument("--allow-network", action="store_true",
                        help="run the tasks on this machine's network: their ports are open to anyone who reaches "
                             "it, and they may download datasets and weights")
    parser.add_argument("--log-dir", help="also keep each task's output in a file of its own there "
                                           "(chief.log, worker_0.log, ...), ending with its exit code")
    parser.add_argument("--grace-secs", type=positive_float, default=DEFAULT_GRACE_SECS,
                        help="after a stop signal, how long each task may take to checkpoint and end before "
                             "SIGKILL (default %(default)s)")
    return parser


def parse(parser, argv):
    """Returns the launcher's args, with `command`: what follows --."""
    argv = sys.argv[1:] if argv is None else argv
    if "--" not in argv:  # the command given without it is no flag of the launcher's
        _, command = parser.parse_known_args(argv)
        parser.error("give the training command after --" + (f", as in ... -- {' '.join(command)}" if command else ""))
    split = argv.index("--")
    args = parser.parse_args(argv[:split])
    args.command = argv[split + 1:]
    if not args.command:
        parser.error("give the training command after --")
    return args


def launch(args):
    """Runs the cluster; returns the launcher's exit code (see LocalCluster.run)."""
    reason = "--allow-network was given" if args.allow_network else isolate_network()
    environ = dict(os.environ)
    if reason is None:
        environ[ISOLATED_VARIABLE] = "1"
    else:
        environ.pop(ISOLATED_VARIABLE, None)
    cluster = LocalCluster(args.command, args.workers, args.ps, args.evaluator, grace_secs=args.grace_secs,
                           environ=environ, log_dir=args.log_dir)
    ports = ", ".join(str(p) for p in cluster.ports())
    if reason is not None:
        exposure = (f"the cluster is NOT isolated ({reason}): its tasks listen on every interface of this machine "
                    f"at TCP ports {ports}, and run any graph whoever connects sends them")
        if not args.allow_network:
            raise UsageError(f"{exposure}; pass --allow-network to run it anyway, on a machine whose network "
                             "only trusted users reach")
        print(f"{os.path.basename(sys.argv[0])}: warning: {exposure}", file=sys.stderr, flush=True)
    else:
        cluster.say("launcher", f"the cluster has a network of its own, reachable only from its tasks "
                                f"(TCP ports {ports} on its loopback)")
    return cluster.run()


if __name__ == "__main__":
    sys.exit(run_command(build_parser(), launch, parse=parse))
