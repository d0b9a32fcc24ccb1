"""A real one-node Slurm on localhost (munged, slurmctld, slurmd from Debian's slurm-wlm and munge,
started here): --cluster slurm under srun, and scripts/slurm/train.sbatch relaunching a job step
whose task was killed until it finishes."""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

from cluster.launcher import free_ports
from tests.conftest import ROOT

SBATCH_SCRIPT = os.path.join(ROOT, "scripts", "slurm", "train.sbatch")
TRAIN = os.path.join(ROOT, "scripts", "train_fashion.py")
DAEMONS = ("munged", "slurmctld", "slurmd", "srun", "sbatch", "sinfo")

SLURM_CONF = """\
ClusterName=local
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={root}/munge.sock
SlurmUser=root
SlurmdUser=root
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
SlurmdParameters=config_overrides
KillWait=5
NodeName={host} NodeAddr=127.0.0.1 CPUs=4 State=UNKNOWN
PartitionName=local Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
"""


def _missing_reason():
    missing = [name for name in DAEMONS if shutil.which(name) is None and not os.path.exists(f"/usr/sbin/{name}")]
    if missing:
        return (f"Slurm is not installed ({', '.join(missing)} missing): apt-get install -y slurm-wlm munge, "
                "as .ci/run does")
    if os.geteuid() != 0:
        return "starting slurmd needs root"
    return None


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """Starts munged, slurmctld and slurmd for one node on localhost; returns the environment that
    points Slurm's commands at it (SLURM_CONF)."""
    reason = _missing_reason()
    if reason:
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("slurm")
    os.chmod(root, 0o755)  # munged checks the socket's folder
    for folder in ("state", "spool"):
        (root / folder).mkdir()
    key = root / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    ctld_port, slurmd_port = free_ports(2)
    conf = root / "slurm.conf"
    conf.write_text(SLURM_CONF.format(host=socket.gethostname().split(".")[0], root=root, ctld_port=ctld_port,
                                      slurmd_port=slurmd_port))
    env = dict(os.environ, SLURM_CONF=str(conf))
    sbin = lambda name: shutil.which(name) or f"/usr/sbin/{name}"  # noqa: E731
    daemons = [subprocess.Popen([sbin("munged"), "-F", "--force", f"--socket={root}/munge.sock", f"--key-file={key}",
                                 f"--log-file={root}/munged.log", f"--pid-file={root}/munged.pid",
                                 f"--seed-file={root}/munged.seed"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)]
    time.sleep(0.5)
    daemons.append(subprocess.Popen([sbin("slurmctld"), "-D", "-i"], env=env, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.STDOUT))
    daemons.append(subprocess.Popen([sbin("slurmd"), "-D"], env=env, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.STDOUT))
    try:
        deadline = time.monotonic() + 60
        while True:
            state = subprocess.run(["sinfo", "-h", "-o", "%T"], env=env, capture_output=True, text=True).stdout
            if state.strip() in ("idle", "mixed", "allocated"):
                break
            if time.monotonic() > deadline:
                logs = "".join((root / f).read_text()[-1500:] for f in ("slurmctld.log", "slurmd.log")
                               if (root / f).exists())
                pytest.fail(f"the local Slurm did not come up (node state {state.strip()!r}):\n{logs}")
            time.sleep(0.5)
        yield env
    finally:
        for daemon in reversed(daemons):
            daemon.terminate()
        for daemon in reversed(daemons):
            try:
                daemon.wait(10)
            except subprocess.TimeoutExpired:
                daemon.kill()


def port_base(count=3):
    """Returns a port p such that p .. p+count-1 were free a moment ago."""
    for _ in range(50):
        base = free_ports(1)[0]
        if base + count < 65000 and all(_free(base + i) for i in range(1, count)):
            return base
    raise RuntimeError("no run of free ports")


def _free(port):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def test_srun_tasks_get_their_roles_from_slurm(slurm):
    code = ("import json, sys; sys.path.insert(0, %r); from cluster.slurm import slurm_tf_config; "
            "print(json.dumps(slurm_tf_config(7000, ps=1)))" % ROOT)
    result = subprocess.run(["srun", "-n", "3", "--kill-on-bad-exit=1", sys.executable, "-c", code], env=slurm,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    configs = sorted((json.loads(line) for line in result.stdout.splitlines()), key=lambda c: c["task"]["type"])
    host = socket.gethostname().split(".")[0]
    assert [c["task"] for c in configs] == [{"type": "chief", "index": 0}, {"type": "ps", "index": 0},
                                            {"type": "worker", "index": 0}]
    assert configs[0]["cluster"] == {"chief": [f"{host}:7000"], "ps": [f"{host}:7001"], "worker": [f"{host}:7002"]}


def _training_task(model_dir, rank):
    """Returns the pid of the training task of `rank` writing to `model_dir`, or None."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().split(b"\0")
            with open(f"/proc/{pid}/environ", "rb") as f:
                environ = f.read().split(b"\0")
        except OSError:
            continue
        if str(model_dir).encode() in cmdline and f"SLURM_PROCID={rank}".encode() in environ:
            return int(pid)
    return None


def test_sbatch_relaunches_a_step_whose_task_was_killed_and_finishes(slurm, fashion_data_dir, tmp_path):
    model_dir = tmp_path / "m"
    log = tmp_path / "job.out"
    flags = ["--strategy", "multi_worker_mirrored", "--data-dir", fashion_data_dir, "--model-dir", str(model_dir),
             "--batch-size", "8", "--max-steps", "100", "--checkpoint-steps", "20", "--warm-up-steps", "2",
             "--log-steps", "50", "--peer-timeout-secs", "10", "--slurm-port-base", str(port_base()),
             "--validation-fraction", "0"]  # validation in a cluster: tests/scripts/test_cluster_early_stop.py
    submitted = subprocess.run(
        ["sbatch", "--parsable", "--ntasks", "3", f"--output={log}", f"--chdir={tmp_path}",
         "--export", f"ALL,PYTHON={sys.executable},RELAUNCH_DELAY_SECS=1", SBATCH_SCRIPT, TRAIN, *flags],
        env=slurm, capture_output=True, text=True, timeout=30)
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.strip().split(";")[0]
    try:
        deadline = time.monotonic() + 180
        while not re.search(r"Saving checkpoints for [1-9]\d* ", log.read_text() if log.exists() else ""):
            assert time.monotonic() < deadline, log.read_text() if log.exists() else "no job output"
            time.sleep(0.3)
        victim = _training_task(model_dir, rank=1)
        assert victim is not None
        os.kill(victim, signal.SIGKILL)
        while subprocess.run(["squeue", "-h", "-j", job], env=slurm, capture_output=True, text=True).stdout.strip():
            assert time.monotonic() < deadline + 240, log.read_text()[-3000:]
            time.sleep(1)
    finally:
        subprocess.run(["scancel", job], env=slurm, capture_output=True)
    text = log.read_text()
    assert "relaunch 1 of 3" in text and "training finished" in text, text[-3000:]
    results = json.loads((model_dir / "results.json").read_text())
    assert results["start_global_step"] >= 20 and results["global_step"] == 100
    assert results["cluster"] == {"strategy": "multi_worker_mirrored", "training_workers": 3}
