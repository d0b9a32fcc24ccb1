import pytest
import tensorflow as tf

from pipeline.distribution import build_distribution
from pipeline.errors import UsageError


def test_without_gpus_training_runs_on_one_cpu_replica():
    plan = build_distribution()
    assert plan.strategy is None and plan.replicas == 1 and plan.devices == ["/cpu:0"]


def test_cpu_replicas_mirror_over_logical_cpus_with_reduction_to_one_device():
    plan = build_distribution(cpu_replicas=2)
    assert isinstance(plan.strategy, tf.distribute.MirroredStrategy)
    assert plan.replicas == plan.strategy.num_replicas_in_sync == 2
    assert plan.devices == ["/cpu:0", "/cpu:1"]
    assert isinstance(plan.strategy.extended._cross_device_ops, tf.distribute.ReductionToOneDevice)


def test_more_gpus_than_visible_is_a_clear_error_naming_both_numbers():
    with pytest.raises(UsageError, match=r"--gpus 4 asks for 4 GPUs but 0 are visible .* --cpu-replicas"):
        build_distribution(gpus=4)


def test_gpus_and_cpu_replicas_together_are_refused():
    with pytest.raises(UsageError, match="exclude each other"):
        build_distribution(gpus=0, cpu_replicas=2)
