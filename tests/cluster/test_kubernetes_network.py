"""The OCT job's NetworkPolicy: only the job's own pods reach its gRPC port (parsed with PyYAML)."""
import yaml

from tests.cluster.test_kubernetes import MANIFEST, load

JOB_LABEL = "training.kubeflow.org/job-name"  # what Kubeflow's training operator labels a TFJob's pods with


def admits(policy, namespace, source_labels, target_labels, port):
    """Returns True when NetworkPolicy `policy` (in `namespace`) lets a pod labelled `source_labels` in
    `namespace` connect to TCP `port` of a pod labelled `target_labels` (Kubernetes' rules, for the
    podSelector/ports forms; any other peer form counts as admitting everyone)."""
    def matches(selector, labels):
        return not selector.get("matchExpressions") and \
            all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())
    if not matches(policy["spec"]["podSelector"], target_labels) or "Ingress" not in policy["spec"]["policyTypes"]:
        return True  # the policy does not restrict that pod
    for rule in policy["spec"].get("ingress", []):
        port_ok = not rule.get("ports") or any(p.get("protocol", "TCP") == "TCP" and p["port"] == port
                                               for p in rule["ports"])
        peers = rule.get("from")
        peer_ok = not peers or any(
            set(peer) != {"podSelector"} or (namespace == policy["metadata"].get("namespace", namespace)
                                             and matches(peer["podSelector"], source_labels))
            for peer in peers)
        if port_ok and peer_ok:
            return True
    return False


def test_only_the_pods_of_the_same_job_reach_its_grpc_port():
    with open(MANIFEST) as f:
        kinds = [document["kind"] for document in yaml.safe_load_all(f)]
    assert kinds == ["TFJob", "NetworkPolicy"]  # one file: applying the job applies its policy
    tfjob, policy = load(), load("NetworkPolicy")
    name = tfjob["metadata"]["name"]
    ports = {p["containerPort"] for spec in tfjob["spec"]["tfReplicaSpecs"].values()
             for p in spec["template"]["spec"]["containers"][0]["ports"] if p["name"] == "tfjob-port"}
    assert len(ports) == 1
    grpc = ports.pop()
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    for rule in policy["spec"]["ingress"]:  # nothing but pod selectors: no ipBlock, no namespaceSelector
        assert all(set(peer) == {"podSelector"} for peer in rule["from"]), rule
    same_job, other_job = {JOB_LABEL: name, "training.kubeflow.org/replica-type": "worker"}, {JOB_LABEL: "other"}
    chief = {JOB_LABEL: name, "training.kubeflow.org/replica-type": "chief"}
    assert admits(policy, "research", same_job, chief, grpc)
    assert not admits(policy, "research", other_job, chief, grpc)
    assert not admits(policy, "research", {}, chief, grpc)  # any pod without the job's label
    assert not admits(policy, "research", same_job, chief, 22)  # the job's own pods, on another port
