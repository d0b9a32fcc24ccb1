import pytest
import tensorflow as tf

from cluster.tf_config import ClusterTask
from pipeline.distribution import build_cluster_distribution, build_distribution
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


@pytest.mark.parametrize("strategy,replicas", [("multi_worker_mirrored", 3), ("parameter_server", 1)])
def test_the_evaluator_counts_the_training_replicas_so_epochs_end_at_the_same_step(strategy, replicas):
    evaluator = ClusterTask("evaluator", 0, num_workers=3)
    plan = build_cluster_distribution(strategy, evaluator)
    assert plan.strategy is None and plan.replicas == replicas
    assert plan.description.startswith("evaluator (no strategy) of a ")


def test_a_cluster_cannot_split_the_cpu_into_replicas():
    with pytest.raises(UsageError, match="--cpu-replicas 2: in a cluster each worker trains one replica"):
        build_cluster_distribution("multi_worker_mirrored", ClusterTask("worker", 0, num_workers=2), cpu_replicas=2)


def test_a_cluster_checks_gpus_like_one_machine():
    with pytest.raises(UsageError, match=r"--gpus 2 asks for 2 GPUs but 0 are visible"):
        build_cluster_distribution("multi_worker_mirrored", ClusterTask("worker", 0, num_workers=2), gpus=2)


@pytest.mark.parametrize("strategy,replicas", [("multi_worker_mirrored", 4), ("parameter_server", 2)])
def test_the_evaluator_needs_one_device_of_the_gpus_the_trainers_take_and_counts_theirs(strategy, replicas):
    """Refused before where it saw fewer GPUs than --gpus: a Kubernetes evaluator had to hold as many as a trainer."""
    plan = build_cluster_distribution(strategy, ClusterTask("evaluator", 0, num_workers=2), gpus=2)
    assert plan.replicas == replicas and plan.devices == ["/cpu:0"]  # (no GPU here: its CPU)
