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


def build_distribution(gpus=None, cpu_replicas=None):
    """Returns the DistributionPlan for `--gpus` / `--cpu-replicas`.

    gpus=None uses every visible GPU, or the CPU when there is none; gpus=N
    mirrors over the first N GPUs with NCCL all-reduce and is a UsageError when
    fewer are visible. cpu_replicas=N mirrors over N logical CPU devices with
    ReductionToOneDevice: the default all-reduce stalls on CPU devices inside
    an Estimator. One device means no strategy at all.
    """
    if gpus is not None and cpu_replicas is not None:
        raise UsageError("--gpus and --cpu-replicas exclude each other: pick one")
    if cpu_replicas is not None:
        devices = split_cpu(cpu_replicas)
        if cpu_replicas == 1:
            return DistributionPlan(None, 1, devices, "1 replica on the CPU")
        strategy = tf.distribute.MirroredStrategy(
            devices, cross_device_ops=tf.distribute.ReductionToOneDevice(reduce_to_device="/cpu:0"))
        return DistributionPlan(strategy, cpu_replicas, devices,
                                f"MirroredStrategy over {cpu_replicas} logical CPU devices "
                                "(ReductionToOneDevice)")
    visible = len(tf.config.list_physical_devices("GPU"))
    if gpus is None:
        gpus = visible
    if gpus > visible:
        hint = "or --cpu-replicas N to mirror over CPU devices" if visible == 0 else "or fewer"
        raise UsageError(
            f"--gpus {gpus} asks for {gpus} GPUs but {visible} {'is' if visible == 1 else 'are'} "
            f"visible to TensorFlow; use --gpus {visible} {hint}")
    if gpus == 0:
        return DistributionPlan(None, 1, ["/cpu:0"], "1 replica on the CPU (no GPU)")
    devices = [f"/gpu:{i}" for i in range(gpus)]
    if gpus == 1:
        return DistributionPlan(None, 1, devices, "1 replica on /gpu:0")
    strategy = tf.distribute.MirroredStrategy(devices, cross_device_ops=tf.distribute.NcclAllReduce())
    return DistributionPlan(strategy, gpus, devices, f"MirroredStrategy over {gpus} GPUs (NCCL all-reduce)")
