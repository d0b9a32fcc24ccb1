"""The cluster side of a run: where the cluster comes from (--cluster), and the watches that end
a task whose cluster cannot go on (peers that never start, or are lost or hung later)."""
import json
import os

import tensorflow as tf

from cluster.peers import PeerWatch
from cluster.slurm import slurm_tf_config
from cluster.tf_config import read_tf_config, without_evaluator
from cluster.watch import ClusterWatch
from hooks.stop import SessionStartedHook
from pipeline import estimator as estimator_lib, progress


def resolve_cluster(args):
    """Returns this process's ClusterTask (None on one machine). With --cluster slurm, TF_CONFIG is
    first written from Slurm's job step, before any strategy or RunConfig reads it; an evaluator
    listed in the cluster (as Kubeflow's operator lists it) is taken out for TensorFlow."""
    if getattr(args, "cluster", "tf_config") == "slurm":
        os.environ["TF_CONFIG"] = json.dumps(slurm_tf_config(args.slurm_port_base, args.slurm_ps))
    cluster = read_tf_config()
    if cluster is not None:
        os.environ["TF_CONFIG"] = without_evaluator(os.environ["TF_CONFIG"])
    return cluster


def watch_cluster(cluster, args, max_steps=None):
    """Starts the watches of this task of `cluster` (nothing on one machine); returns the training
    hooks they need. A lost peer ends the task with cluster.peers.PEER_LOST_EXIT. Without
    `max_steps` (a parameter server reads no data to work it out), the final step is the one the
    chief recorded in the model dir."""
    if cluster is None:
        return []

    def finished():
        final = max_steps if max_steps is not None else progress.final_step(args.model_dir)
        return final is not None and estimator_lib.latest_global_step(args.model_dir) >= final
    peers = PeerWatch(cluster, args.model_dir, args.peer_timeout_secs, finished=finished)
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
