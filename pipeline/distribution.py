"""Chooses the devices a job trains on and builds the matching tf.distribute strategy."""
import dataclasses
from typing import List, Optional

import tensorflow as tf

from pipeline.errors import UsageError


@dataclasses.dataclass
class DistributionPlan:
    """Where training runs: the strategy (None for one device), its replicas and devices."""
    strategy: Optional[tf.distribute.Strategy]
    replicas: int
    devices: List[str]
    description: str


def split_cpu(num_devices):
    """Splits the first physical CPU into `num_devices` logical devices; returns their names.

    TensorFlow allows this only before its runtime starts; a process that
    already has at least `num_devices` logical CPUs keeps them.
    """
    cpu = tf.config.list_physical_devices("CPU")[0]
    configured = tf.config.get_logical_device_configuration(cpu)
    if configured is None or len(configured) < num_devices:
        try:
            tf.config.set_logical_device_configuration(
                cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(num_devices)])
        except RuntimeError:
            raise UsageError(
                f"cannot split the CPU into {num_devices} devices: TensorFlow's runtime was "
                f"already started in this process with {len(configured or [1])}") from None
    return [f"/cpu:{i}" for i in range(num_devices)]


def gpu_count(gpus=None):
    """Returns the number of GPUs `--gpus` asks for: every visible one when None.

    Raises UsageError when it asks for more than TensorFlow sees.
    """
    visible = len(tf.config.list_physical_devices("GPU"))
    if gpus is None:
        return visible
    if gpus > visible:
        hint = "or --cpu-replicas N to mirror over CPU devices" if visible == 0 else "or fewer"
        raise UsageError(
            f"--gpus {gpus} asks for {gpus} GPU{'s' if gpus > 1 else ''} but {visible} "
            f"{'is' if visible == 1 else 'are'} visible to TensorFlow; use --gpus {visible} {hint}")
    return gpus


def replica_devices(gpus=None, cpu_replicas=None):
    """Returns the devices one machine trains on for `--gpus` / `--cpu-replicas` (see build_distribution)."""
    if cpu_replicas is not None:
        return split_cpu(cpu_replicas)
    return [f"/gpu:{i}" for i in range(gpu_count(gpus))] or ["/cpu:0"]


def use_first_gpus(count):
    """Makes only the first `count` GPUs visible to TensorFlow in this process; returns their names.

    TF 1's multi-worker strategies take every GPU TensorFlow sees
    (context.num_gpus()), so this is how --gpus N reaches them. It must run
    before TensorFlow's runtime starts. (A command line has hidden the others
    already, pipeline.gpu_visibility.visible_gpus: this reaches the eager context alone,
    not the task's TensorFlow server; it keeps a caller in-process right.)
    """
    visible = tf.config.list_physical_devices("GPU")
    if count < len(visible):  # hiding the rest
        try:
            tf.config.set_visible_devices(visible[:count], "GPU")
        except RuntimeError:
            raise UsageError(f"cannot limit TensorFlow to {count} GPU(s): its runtime was already started") from None
    return [f"/gpu:{i}" for i in range(count)]


def _evaluator_devices(gpus, cpu_replicas):
    """Returns (the one device an evaluator evaluates on: its first GPU, else the CPU; the replicas each trainer
    has, from the same device flags). Under --gpus N it sees one GPU (pipeline.gpu_visibility), whatever N."""
    visible = 0 if cpu_replicas is not None else gpu_count(None)
    trainers = 1 if cpu_replicas is not None else gpus if gpus is not None else visible
    return ["/gpu:0"] if visible else ["/cpu:0"], max(trainers, 1)


def build_cluster_distribution(strategy_name, cluster, gpus=None, cpu_replicas=None):
    """Returns the DistributionPlan of one task of a TF_CONFIG cluster.

    Each worker trains on its first `gpus` GPUs (default: all it sees), or on
    one CPU replica: TF's multi-worker strategies do not split a CPU, so
    `cpu_replicas` above 1 is a UsageError. 'multi_worker_mirrored' mirrors
    synchronously over every worker's replicas (all-reduce over the network:
    ring on CPUs, NCCL on GPUs), so `replicas` counts all workers';
    'parameter_server' trains each worker asynchronously against variables on
    the ps tasks, so a step is one worker's replicas' batch. The evaluator gets
    no strategy (given one, TF 2.15 fails in worker_count()), but the same
    `replicas` as the trainers, so that every task computes the same final step
    from --epochs; give every task the same device flags. It evaluates on one
    device, its first GPU (it needs no more than one, whatever --gpus says), else
    the CPU.
    The Estimator's distribute coordinator configures the strategy per task.
    """
    if strategy_name not in ("multi_worker_mirrored", "parameter_server"):
        raise UsageError(f"--strategy {strategy_name} cannot train a TF_CONFIG cluster; use multi_worker_mirrored "
                         "or parameter_server, or unset TF_CONFIG")
    if cpu_replicas is not None and cpu_replicas > 1:
        raise UsageError(f"--cpu-replicas {cpu_replicas}: in a cluster each worker trains one replica on its CPU "
                         "(TF's multi-worker strategies cannot split it); drop --cpu-replicas, or add workers")
    if cluster.task_type == "evaluator":
        devices, per_worker = _evaluator_devices(gpus, cpu_replicas)
    else:
        devices = use_first_gpus(0 if cpu_replicas is not None else gpu_count(gpus)) or ["/cpu:0"]
        per_worker = len(devices)
    on_gpus = devices[0].startswith("/gpu")
    if strategy_name == "multi_worker_mirrored":
        replicas = per_worker * cluster.num_workers
        description = f"MultiWorkerMirroredStrategy over {cluster.num_workers} workers x {per_worker} replica(s)"
    else:
        replicas = per_worker
        description = (f"ParameterServerStrategy (v1), {cluster.num_workers} asynchronous workers x "
                       f"{per_worker} replica(s)")
    if cluster.task_type == "evaluator":
        return DistributionPlan(None, replicas, devices, f"evaluator (no strategy) of a {description}")
    if strategy_name == "multi_worker_mirrored":
        strategy = tf.compat.v1.distribute.experimental.MultiWorkerMirroredStrategy(
            communication=tf.distribute.experimental.CollectiveCommunication.NCCL if on_gpus
            else tf.distribute.experimental.CollectiveCommunication.RING)
    else:
        strategy = tf.compat.v1.distribute.experimental.ParameterServerStrategy()
    return DistributionPlan(strategy, replicas, devices, description)


def build_distribution(gpus=None, cpu_replicas=None, strategy="mirrored"):
    """Returns the DistributionPlan for `--gpus` / `--cpu-replicas` / `--strategy` on one machine.

    gpus=None uses every visible GPU, or the CPU when there is none; gpus=N
    mirrors over the first N GPUs with NCCL all-reduce and is a UsageError when
    fewer are visible. cpu_replicas=N mirrors over N logical CPU devices with
    ReductionToOneDevice: the default all-reduce stalls on CPU devices inside
    an Estimator. One device means no strategy at all. strategy='central_storage'
    keeps the variables on the CPU and mirrors the computation over the devices
    (CentralStorageStrategy: gradients are summed where the variables are).
    """
    devices = replica_devices(gpus, cpu_replicas)
    if strategy == "central_storage":
        return DistributionPlan(
            tf.distribute.experimental.CentralStorageStrategy(devices, parameter_device="/cpu:0"), len(devices),
            devices, f"CentralStorageStrategy: variables on /cpu:0, compute over {len(devices)} "
                     f"{'GPU' if devices[0].startswith('/gpu') else 'logical CPU device'}(s)")
    if devices[0].startswith("/cpu"):
        if len(devices) == 1:
            return DistributionPlan(None, 1, devices, "1 replica on the CPU" + ("" if cpu_replicas else " (no GPU)"))
        strategy = tf.distribute.MirroredStrategy(
            devices, cross_device_ops=tf.distribute.ReductionToOneDevice(reduce_to_device="/cpu:0"))
        return DistributionPlan(strategy, len(devices), devices,
                                f"MirroredStrategy over {len(devices)} logical CPU devices (ReductionToOneDevice)")
    if len(devices) == 1:
        return DistributionPlan(None, 1, devices, "1 replica on /gpu:0")
    strategy = tf.distribute.MirroredStrategy(devices, cross_device_ops=tf.distribute.NcclAllReduce())
    return DistributionPlan(strategy, len(devices), devices,
                            f"MirroredStrategy over {len(devices)} GPUs (NCCL all-reduce)")
