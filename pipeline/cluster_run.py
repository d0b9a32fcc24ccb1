"""The cluster side of a run: where the cluster comes from (--cluster), and the watches that end
a task whose cluster cannot go on (peers that never start, or are lost or hung later)."""
import json
import logging
import os

import tensorflow as tf

from cluster.isolation import log_listening_ports
from cluster.lifeline import follow_launcher
from cluster.peers import PeerWatch
from cluster.slurm import slurm_tf_config
from cluster.tf_config import read_tf_config, without_evaluator
from cluster.watch import ClusterWatch
from hooks.stop import SessionStartedHook
from pipeline import estimator as estimator_lib, results as results_lib


def resolve_cluster(args):
    """Returns this process's ClusterTask (None on one machine). With --cluster slurm, TF_CONFIG is
    first written from Slurm's job step, before any strategy or RunConfig reads it; an evaluator
    listed in the cluster (as Kubeflow's operator lists it) is taken out for TensorFlow. A task of
    launch_local_cluster.py starts following its launcher here: it ends when the launcher dies."""
    follow_launcher()
    if getattr(args, "cluster", "tf_config") == "slurm":
        os.environ["TF_CONFIG"] = json.dumps(slurm_tf_config(args.slurm_port_base, args.slurm_ps))
    cluster = read_tf_config()
    if cluster is not None:
        os.environ["TF_CONFIG"] = without_evaluator(os.environ["TF_CONFIG"])
    return cluster


def training_finished(model_dir, max_steps=None):
    """Returns True once the newest checkpoint in `model_dir` is at `max_steps` or past it; without
    `max_steps` (a parameter server does not compute it), once the chief's results.json is of the
    newest checkpoint."""
    step = estimator_lib.latest_global_step(model_dir)
    if max_steps is not None:
        return step >= max_steps
    try:
        return step > 0 and results_lib.read_results(model_dir).get("global_step") == step
    except (OSError, ValueError):
        return False


def watch_cluster(cluster, args, max_steps):
    """Starts the watches of this task of `cluster` (nothing on one machine); returns the training
    hooks they need. A lost peer ends the task with cluster.peers.PEER_LOST_EXIT. `max_steps` is
    the final step (None on a parameter server)."""
    if cluster is None:
        return []
    log_listening_ports(cluster, logging.getLogger(__name__))
    peers = PeerWatch(cluster, args.model_dir, args.peer_timeout_secs,
                      finished=lambda: training_finished(args.model_dir, max_steps))
    tf.get_logger().filters.insert(0, peers.recovery_filter())  # before the filter that drops INFO lines
    if not cluster.trains:  # a ps serves, the evaluator reads checkpoints: no session to wait for
        peers.start()
        if cluster.task_type == "ps":
            return []
    startup = ClusterWatch(cluster, args.cluster_wait_secs, args.model_dir,
                           every_secs=min(10.0, args.cluster_wait_secs / 3)).start()

    def started():
        startup.started()
        peers.start()
    return [SessionStartedHook(started)] if cluster.trains else []
