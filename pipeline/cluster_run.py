"""The cluster side of a run: where the cluster comes from (--cluster), and the watches of each role
that end a task whose cluster cannot go on (peers that never start, or are lost or hung later)."""
import json
import logging
import os
import time

import tensorflow as tf

from cluster.isolation import log_listening_ports
from cluster.lifeline import follow_launcher
from cluster.peers import PeerWatch, probe
from cluster.slurm import slurm_tf_config
from cluster.tf_config import read_tf_config, without_evaluator
from cluster.watch import ClusterWatch
from hooks.stepping import OwnStepsHook
from hooks.stop import SessionStartedHook
from pipeline import model_dir as model_dir_lib, results as results_lib, training_record as progress
from pipeline.gpu_visibility import narrow_visible_gpus
from pipeline.validation import agreed_stop
from pipeline.validation.early_stopping import early_stopping_of

# How often a worker rechecks whether the chief has initialized (or restored) the variables.
WORKER_READY_RECHECK_SECS = 1.0


def resolve_cluster(settings):
    """Returns this process's ClusterTask (None on one machine). With --cluster slurm, TF_CONFIG is
    first written from Slurm's job step, before any strategy or RunConfig reads it; an evaluator
    listed in the cluster (as Kubeflow's operator lists it) is taken out for TensorFlow. A task of
    launch_local_cluster.py starts following its launcher here: it ends when the launcher dies."""
    follow_launcher()
    if getattr(settings, "cluster", "tf_config") == "slurm":
        os.environ["TF_CONFIG"] = json.dumps(slurm_tf_config(settings.slurm_port_base, settings.slurm_ps))
        # The resolver gave this task its share of the node's GPUs (where Slurm allotted none): --gpus N of it.
        narrow_visible_gpus(settings.gpus, settings.cpu_replicas)
    cluster = read_tf_config()
    if cluster is not None:
        os.environ["TF_CONFIG"] = without_evaluator(os.environ["TF_CONFIG"])
    return cluster


def training_finished(model_dir, max_steps=None, current_stop=None):
    """Returns True once the newest checkpoint in `model_dir` is at `max_steps` or past it. A
    parameter server does not compute `max_steps` (None): it reads the final step the chief recorded
    before training (pipeline.training_record), or, in a record without one, waits for the chief's
    results.json of the newest checkpoint. After an early stop, the newest checkpoint at or past the
    stop record's step has finished training too. Not results.json alone: the chief writes it only after
    its test evaluation and export, long after its final checkpoint, and a chief that fails probes
    meanwhile (slow to answer on a loaded machine) must not be taken for a lost one. `current_stop`
    (an agreed_stop.CurrentStop made at the task's start) reads the stop record, setting aside an
    earlier run's; without it the record is read as it is."""
    step = model_dir_lib.latest_global_step(model_dir)
    # An early stop every trainer agreed on (pipeline.validation.agreed_stop).
    stopped = current_stop() if current_stop is not None else agreed_stop.read_stop(model_dir)
    if stopped is not None and step >= stopped["stop_after_step"]:
        return True
    if max_steps is None:
        max_steps = progress.final_step(model_dir)
    if max_steps is not None:
        return step >= max_steps > 0
    try:
        return step > 0 and results_lib.read_results(model_dir).get("global_step") == step
    except (OSError, ValueError):
        return False


def finished_check(settings, max_steps):
    """Returns a callable returning training_finished(settings.model_dir, max_steps), its stop record read
    through an agreed_stop.CurrentStop made now under the settings' early-stopping rule: call it at the task's
    start."""
    current_stop = agreed_stop.CurrentStop(settings.model_dir, early_stopping_of(settings))
    return lambda: training_finished(settings.model_dir, max_steps, current_stop)


def _peer_watch(cluster, settings, max_steps, stop_signal=None, stop_taken=None):
    """Returns the PeerWatch of this task of `cluster` (not started), its recovery lines filtered. A
    lost peer ends the task with cluster.peers.PEER_LOST_EXIT, unless the task was asked to stop: see
    PeerWatch's `stop_signal` and `stop_taken`. `max_steps` is the final step (None on a parameter
    server, which also ends on a finished model dir once this launch's chief came and went)."""
    log_listening_ports(cluster, logging.getLogger(__name__))
    on_ps = cluster.task_type == "ps"
    peers = PeerWatch(cluster, settings.model_dir, settings.peer_timeout_secs,
                      finished=finished_check(settings, max_steps),
                      stop_signal=stop_signal or (lambda: None), stop_taken=stop_taken or (lambda: False),
                      chief_came_and_went=_lock_taken_and_released_since(settings.model_dir, process_started_at())
                      if on_ps else (lambda: False))
    tf.get_logger().filters.insert(0, peers.recovery_filter())  # before the filter that drops INFO lines
    return peers


def _lock_taken_and_released_since(model_dir, since):
    """Returns a callable returning whether a run took the lock of `model_dir` after `since` (time.time()) and
    none holds it now: this launch's chief came and went. A chief that trains records its final step before it
    lets the lock go, so training is not finished by then (see training_finished). A lease (a URL's lock) is
    removed when let go: never true there."""
    def came_and_went():
        taken = model_dir_lib.lock_taken_at(model_dir)
        return taken is not None and taken > since and model_dir_lib.run_holding(model_dir) is None
    return came_and_went


def process_started_at():
    """Returns when this process started, in seconds since the epoch (to a second: /proc's boot time is whole
    seconds), or now where /proc does not say. Not when a watch starts: a relaunched chief may take its model
    dir's lock while this task still imports TensorFlow."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22, starttime, in clock ticks since boot
        with open("/proc/stat") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith("btime "))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return time.time()


def _startup_watch(cluster, settings, stop_signal=None):
    """Returns the started ClusterWatch that gives up when training has not started in time, or when
    `stop_signal()` returns a signal first."""
    return ClusterWatch(cluster, settings.cluster_wait_secs, settings.model_dir,
                        every_secs=min(10.0, settings.cluster_wait_secs / 3),
                        stop_signal=stop_signal or (lambda: None)).start()


def watch_parameter_server(cluster, settings, stop_signal=None):
    """Starts watching a parameter server's peers (it serves: no session to wait for); returns None. Once
    `stop_signal()` returns a signal, it ends when the chief, which saves the checkpoints, no longer answers
    (see PeerWatch)."""
    _peer_watch(cluster, settings, max_steps=None, stop_signal=stop_signal).start()


def watch_evaluator(cluster, settings, max_steps):
    """Starts watching the evaluator's peers and the cluster's start (it reads checkpoints: no session
    to wait for); returns None."""
    _peer_watch(cluster, settings, max_steps).start()
    _startup_watch(cluster, settings)


def watch_trainer(cluster, settings, max_steps, stop_signal=None, stop_taken=None):
    """Starts the watches of a training task (chief or worker) of `cluster`; returns the training hooks
    they need: its peers are watched once its session has started, and an OwnStepsHook. See
    _peer_watch for `stop_signal` and `stop_taken`."""
    peers = _peer_watch(cluster, settings, max_steps, stop_signal, stop_taken)
    startup = _startup_watch(cluster, settings, stop_signal)

    def started():
        startup.started()
        peers.start()
    return [SessionStartedHook(started), OwnStepsHook(f"{cluster.task_type} {cluster.index}")]


def wait_for_chief_checkpoint(cluster, model_dir, step, wait_secs):
    """Waits until the chief's checkpoint of global `step` (or a newer one) is in `model_dir`, the
    chief no longer answers, or `wait_secs` have passed; returns whether the checkpoint is there.
    For a worker that stopped after `step` (hooks.stop.StopOnRequestHook): the chief writes its
    checkpoint as its session ends, and the worker's own last line names it; under parameter_server a
    worker that ended first would have the scheduler end the chief's job step before that save."""
    return _wait_for_chief(cluster, lambda: model_dir_lib.latest_global_step(model_dir) >= step,
                           f"the chief's checkpoint of global step {step}", wait_secs)


def wait_for_final_checkpoint(cluster, finished):
    """Waits, for as long as the chief answers, until `finished()` (see finished_check); returns whether it is.
    For a parameter-server worker at the end of training: its chief may still be validating, then steps once
    more and saves the final checkpoint, and takes a worker that ends before that for a lost one."""
    return _wait_for_chief(cluster, finished, "the chief's final checkpoint", wait_secs=None, every_secs=1.0)


def _wait_for_chief(cluster, done, waited_for, wait_secs, every_secs=0.2):
    """Waits until `done()`, the chief no longer answers or `wait_secs` have passed (None: no limit), looking every
    `every_secs` and saying so every minute; returns whether done() is."""
    start = time.monotonic()
    deadline, said_at = None if wait_secs is None else start + wait_secs, None
    chief = cluster.addresses["chief"][0]
    while not done():
        now = time.monotonic()
        if (deadline is not None and now >= deadline) or probe(chief) is not None:
            return False
        if said_at is None or now - said_at >= 60:
            logging.getLogger(__name__).info("waiting for %s (%.0f s so far; the chief answers)", waited_for,
                                             now - start)
            said_at = now
        time.sleep(every_secs)
    return True


def recheck_model_readiness_every(secs):
    """Makes a worker's session wait for the chief's variables recheck every `secs` seconds, not
    every 30; returns None. In TF 2.15 a distributed MonitoredTrainingSession gets its session
    creator from the distribute coordinator (tensorflow/python/training/monitored_session.py:416):
    where the strategy says this task does not initialize variables (ParameterServerStrategy's
    experimental_should_init is its is_chief, distribute/parameter_server_strategy.py:666-667;
    CollectiveAllReduceStrategy's is always True, collective_all_reduce_strategy.py:965-966), that is
    a WorkerSessionCreator (distribute/distribute_coordinator.py:246-260), whose
    _get_session_manager builds a SessionManager with the default recovery_wait_secs=30
    (monitored_session.py:700-711, session_manager.py:125). Its wait_for_session sleeps that long
    after each check that finds the variables not ready (session_manager.py:453-478), and neither
    the Estimator nor RunConfig passes another value: a parameter-server worker started beside its
    chief idled ~30 s. Each recheck opens a session and runs the ready ops: cheap. Only cluster
    trainers that are not the chief call this."""
    from tensorflow.python.training import monitored_session  # noqa: PLC0415 - the class TF uses itself
    creator = monitored_session.WorkerSessionCreator
    creator.recheck_secs = secs
    if getattr(creator, "_tf_get_session_manager", None) is None:
        creator._tf_get_session_manager = creator._get_session_manager  # noqa: SLF001

        def _get_session_manager(self):
            manager = self._tf_get_session_manager()
            manager._recovery_wait_secs = type(self).recheck_secs  # noqa: SLF001 - read by wait_for_session
            return manager
        creator._get_session_manager = _get_session_manager  # noqa: SLF001
