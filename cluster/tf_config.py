"""TF_CONFIG: reading and checking it, and the cluster facts the run loop needs."""
import dataclasses
import json
import os
from typing import Optional

_TASK_TYPES = ("chief", "worker", "ps", "evaluator")


class ClusterConfigError(Exception):
    """TF_CONFIG that does not describe a usable cluster; the message names the fault."""


@dataclasses.dataclass
class ClusterTask:
    """This process's place in a TF_CONFIG cluster."""
    task_type: str
    index: int
    num_workers: int  # chief + workers: the processes that train
    addresses: dict = dataclasses.field(default_factory=dict)  # job -> [host:port], as TF_CONFIG lists them

    @property
    def is_chief(self):
        return self.task_type == "chief"

    @property
    def trains(self):
        return self.task_type in ("chief", "worker")


def names_an_evaluator(environ=None):
    """Returns whether TF_CONFIG names this process a cluster's evaluator, read before anything checks it (a
    TF_CONFIG that is not valid is read_tf_config's to refuse: False here)."""
    try:
        task = json.loads((environ if environ is not None else os.environ).get("TF_CONFIG", "") or "{}")["task"]
        return task["type"] == "evaluator"
    except (ValueError, KeyError, TypeError):
        return False


def read_tf_config(environ=None) -> Optional[ClusterTask]:
    """Returns this process's ClusterTask from TF_CONFIG, or None when TF_CONFIG names no cluster.

    Raises ClusterConfigError naming the fault when TF_CONFIG is not valid JSON or does
    not describe a usable cluster (no chief, unknown task type, index out of range).
    """
    text = (environ if environ is not None else os.environ).get("TF_CONFIG", "").strip()
    if not text:
        return None
    try:
        config = json.loads(text)
    except ValueError as e:
        raise ClusterConfigError(f"TF_CONFIG is not valid JSON ({e}); unset it for a single-machine run") from None
    if not isinstance(config, dict):
        raise ClusterConfigError("TF_CONFIG must be a JSON object with 'cluster' and 'task'")
    cluster, task = config.get("cluster") or {}, config.get("task") or {}
    if not isinstance(task, dict):
        raise ClusterConfigError(f"TF_CONFIG's 'task' must be an object like {{\"type\": \"worker\", \"index\": 0}}, "
                         f"got {task!r}")
    if not cluster:
        return None
    if not isinstance(cluster, dict) or not all(isinstance(v, list) for v in cluster.values()):
        raise ClusterConfigError("TF_CONFIG's 'cluster' must map job names to lists of host:port addresses")
    _check_addresses(cluster)
    unknown = sorted(set(cluster) - set(_TASK_TYPES))
    if unknown:
        raise ClusterConfigError(f"TF_CONFIG's cluster has unknown job(s) {', '.join(unknown)}; "
                         f"known: {', '.join(_TASK_TYPES)}")
    if len(cluster.get("chief", [])) != 1:
        raise ClusterConfigError("TF_CONFIG's cluster needs exactly one 'chief' address")
    task_type, index = task.get("type"), task.get("index", 0)
    if task_type not in _TASK_TYPES or not isinstance(index, int):
        raise ClusterConfigError(f"TF_CONFIG's task must have a 'type' among {', '.join(_TASK_TYPES)} and an integer "
                         f"'index', got {task!r}")
    if task_type != "evaluator" and not 0 <= index < len(cluster.get(task_type, [])):
        raise ClusterConfigError(f"TF_CONFIG's task {task_type} {index} is not in its cluster "
                         f"({len(cluster.get(task_type, []))} {task_type} address(es))")
    # Kubeflow's TFJob operator lists the evaluator in the cluster too; it serves nothing there.
    training_cluster = {job: addresses for job, addresses in cluster.items() if job != "evaluator"}
    return ClusterTask(task_type, index, 1 + len(cluster.get("worker", [])), training_cluster)


def _check_addresses(cluster):
    """Raises ClusterConfigError for an address that is not host:port (a port from 1 to 65535), or one that two
    tasks share (the chief would answer its own probe of a worker and wait for it for ever)."""
    seen = {}
    for job, addresses in cluster.items():
        for index, address in enumerate(addresses):
            host, _, port = str(address).rpartition(":")
            if not (isinstance(address, str) and host and port.isdigit() and 0 < int(port) < 65536):
                raise ClusterConfigError(f"TF_CONFIG's {job} {index} address {address!r} is not host:port (a port "
                                         "from 1 to 65535); give each task its own, e.g. \"10.0.0.2:2222\"")
            if address in seen:
                raise ClusterConfigError(f"TF_CONFIG gives {seen[address]} and {job} {index} the same address, "
                                         f"{address}; give each task its own port")
            seen[address] = f"{job} {index}"


def without_evaluator(text):
    """Returns TF_CONFIG text `text` with any 'evaluator' job taken out of its cluster, as
    TensorFlow's Estimator expects (the evaluator is not part of the training cluster)."""
    config = json.loads(text)
    if "evaluator" not in (config.get("cluster") or {}):
        return text
    config["cluster"] = {job: a for job, a in config["cluster"].items() if job != "evaluator"}
    return json.dumps(config)
