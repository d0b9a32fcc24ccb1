"""Probing a peer at the gRPC level: a live TensorFlow server, a stopped one, a killed one; and the
Slurm job step's TF_CONFIG outside srun."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from cluster.launcher import free_ports
from cluster.peers import REFUSED, peers_of, probe
from cluster.slurm import slurm_tf_config
from cluster.tf_config import ClusterConfigError, ClusterTask

SERVER = """
import sys, tensorflow as tf
server = tf.distribute.Server({"worker": ["127.0.0.1:%s" % sys.argv[1]]}, job_name="worker", task_index=0)
print("up", flush=True)
server.join()
"""


def test_a_probe_tells_a_live_server_from_a_stopped_and_a_killed_one():
    port = free_ports(1)[0]
    address = f"127.0.0.1:{port}"
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(port)], stdout=subprocess.PIPE, text=True,
                              env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    try:
        assert server.stdout.readline().strip() == "up"
        assert probe(address) is None
        os.kill(server.pid, signal.SIGSTOP)  # a hang, or a partition: the kernel still accepts connections
        while open(f"/proc/{server.pid}/stat").read().split(") ")[1][0] != "T":  # stopped (the signal is async)
            time.sleep(0.05)
        assert probe(address, timeout=1.0) == "does not answer"
        os.kill(server.pid, signal.SIGCONT)
        assert probe(address) is None
    finally:
        server.kill()
        server.wait()
    assert probe(address) == REFUSED


def test_each_task_watches_the_tasks_its_work_needs():
    addresses = {"chief": ["c:1"], "worker": ["w0:1", "w1:1"], "ps": ["p:1"]}
    assert set(peers_of(ClusterTask("chief", 0, 3, addresses))) == {"worker 0", "worker 1", "ps 0"}
    assert set(peers_of(ClusterTask("worker", 1, 3, addresses))) == {"chief 0", "worker 0", "ps 0"}
    assert set(peers_of(ClusterTask("ps", 0, 3, addresses))) == {"chief 0", "worker 0", "worker 1"}
    assert set(peers_of(ClusterTask("evaluator", 0, 3, addresses))) == {"chief 0"}


def test_slurm_cluster_outside_a_job_step_is_one_line_naming_srun():
    with pytest.raises(ClusterConfigError, match="start the command with srun"):
        slurm_tf_config(environ={})
    step = {"SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "2", "SLURM_STEP_NODELIST": "n1",
            "SLURM_STEP_TASKS_PER_NODE": "2"}
    with pytest.raises(ClusterConfigError, match="needs at least 3 tasks"):
        slurm_tf_config(ps=1, environ=step)
    assert slurm_tf_config(9000, environ=dict(step, SLURM_PROCID="1")) == {
        "cluster": {"chief": ["n1:9000"], "worker": ["n1:9001"]}, "task": {"type": "worker", "index": 0}}


@pytest.mark.parametrize("chief, worker, words", [
    ("127.0.0.1", "127.0.0.1:41042", "TF_CONFIG's chief 0 address '127.0.0.1' is not host:port"),  # a traceback
    ("127.0.0.1:abc", "127.0.0.1:41042", "TF_CONFIG's chief 0 address '127.0.0.1:abc' is not host:port"),
    ("127.0.0.1:41041", "127.0.0.1:70000", "TF_CONFIG's worker 0 address '127.0.0.1:70000' is not host:port"),
    ("127.0.0.1:41041", "127.0.0.1:41041", "TF_CONFIG gives chief 0 and worker 0 the same address, 127.0.0.1:41041"),
])
def test_an_address_that_is_not_one_task_s_host_and_port_is_named(chief, worker, words):
    from cluster.tf_config import read_tf_config
    config = {"cluster": {"chief": [chief], "worker": [worker]}, "task": {"type": "chief", "index": 0}}
    with pytest.raises(ClusterConfigError) as raised:
        read_tf_config({"TF_CONFIG": json.dumps(config)})
    assert str(raised.value).startswith(words)
    config["cluster"]["worker"] = ["[::1]:41042"]  # an IPv6 host's colons are its own
    config["cluster"]["chief"] = ["host-a:41041"]
    assert read_tf_config({"TF_CONFIG": json.dumps(config)}).num_workers == 2
