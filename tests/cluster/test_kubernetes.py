"""The TFJob manifest of the OCT job, and the TF_CONFIG that Kubeflow's operator gives each of its
replicas (`<job>-<type>-<i>.<namespace>.svc:<port>`, the task type lowercased), read by the project."""
import json
import os

import yaml

from cluster.peers import peers_of
from cluster.tf_config import read_tf_config, without_evaluator
from pipeline.flags import build_parser
from pipeline.tasks.oct import TASK as OCT
from tests.conftest import ROOT

MANIFEST = os.path.join(ROOT, "scripts", "kubernetes", "oct-tfjob.yaml")


def operator_tf_config(tfjob, replica_type, index, namespace="research"):
    """Returns the TF_CONFIG text the TFJob operator injects into replica `index` of `replica_type`."""
    name, specs = tfjob["metadata"]["name"], tfjob["spec"]["tfReplicaSpecs"]
    cluster = {}
    for rtype, spec in specs.items():
        port = next(p["containerPort"] for p in spec["template"]["spec"]["containers"][0]["ports"]
                    if p["name"] == "tfjob-port")
        cluster[rtype.lower()] = [f"{name}-{rtype.lower()}-{i}.{namespace}.svc:{port}"
                                  for i in range(spec["replicas"])]
    return json.dumps({"cluster": cluster, "task": {"type": replica_type.lower(), "index": index},
                       "environment": "cloud"})


def load(kind="TFJob"):
    with open(MANIFEST) as f:
        return next(document for document in yaml.safe_load_all(f) if document["kind"] == kind)


def test_every_replica_of_the_manifest_gets_its_role_from_the_operators_tf_config():
    tfjob = load()
    specs = tfjob["spec"]["tfReplicaSpecs"]
    roles = {}
    for rtype, spec in specs.items():
        for i in range(spec["replicas"]):
            task = read_tf_config({"TF_CONFIG": operator_tf_config(tfjob, rtype, i)})
            roles[(rtype, i)] = task
            assert (task.task_type, task.index) == (rtype.lower(), i)
            assert task.num_workers == 1 + specs["Worker"]["replicas"]
            assert "evaluator" not in task.addresses  # probed by no one: it serves nothing
    assert roles[("Chief", 0)].is_chief and roles[("Chief", 0)].trains
    assert all(roles[("Worker", i)].trains and not roles[("Worker", i)].is_chief for i in range(3))
    assert not roles[("Evaluator", 0)].trains
    # Who watches whom: a worker every other trainer; the evaluator only the chief.
    assert peers_of(roles[("Worker", 1)]) == {"chief 0": "oct-chief-0.research.svc:2222",
                                              "worker 0": "oct-worker-0.research.svc:2222",
                                              "worker 2": "oct-worker-2.research.svc:2222"}
    assert peers_of(roles[("Evaluator", 0)]) == {"chief 0": "oct-chief-0.research.svc:2222"}
    # TensorFlow is handed the training cluster only.
    handed = json.loads(without_evaluator(operator_tf_config(tfjob, "Evaluator", 0)))
    assert set(handed["cluster"]) == {"chief", "worker"} and handed["task"] == {"type": "evaluator", "index": 0}


def test_the_manifest_restarts_on_retryable_exits_and_gives_every_task_gpus_data_and_model_dir():
    tfjob = load()
    assert tfjob["apiVersion"] == "kubeflow.org/v1" and tfjob["kind"] == "TFJob"
    specs = tfjob["spec"]["tfReplicaSpecs"]
    assert set(specs) == {"Chief", "Worker", "Evaluator"} and specs["Chief"]["replicas"] == 1
    assert specs["Chief"]["restartPolicy"] == specs["Worker"]["restartPolicy"] == "ExitCode"
    for spec in specs.values():
        pod = spec["template"]["spec"]
        container = pod["containers"][0]
        assert container["name"] == "tensorflow"  # where the operator puts TF_CONFIG
        args = container["args"]
        flag = lambda name: args[args.index(name) + 1]  # noqa: E731
        assert container["command"][-1] == "scripts/train_oct.py"
        assert flag("--strategy") == "multi_worker_mirrored"
        gpus = 1 if spec is specs["Evaluator"] else int(flag("--gpus"))  # it evaluates on one (pipeline.distribution)
        assert int(container["resources"]["limits"]["nvidia.com/gpu"]) == gpus
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        assert flag("--data-dir").startswith(mounts["data"] + "/") and flag("--model-dir").startswith(
            mounts["runs"] + "/")
        assert {v["name"] for v in pod["volumes"]} == {"data", "runs"}
        parsed = build_parser(OCT).parse_args(args)  # the job's own parser takes every flag
        assert parsed.cluster == "tf_config" and 5 <= parsed.peer_timeout_secs <= 120
