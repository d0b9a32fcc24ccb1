"""The lock of a model dir on a file system without flock (a URL): a lease, tried on ram://. ram://
lives in one process, so a second run is a lease planted there (fresh: refused; stale: taken over)."""
import json
import os
import re
import socket
import sys
import time
import uuid

import pytest

from acquisition import locks, storage
from pipeline import model_dir as model_dir_lib
from pipeline.cli import train_main
from pipeline.errors import UsageError
from pipeline.tasks.fashion import TASK

PROG = os.path.basename(sys.argv[0])  # what argparse names the program: the test runner's


def plant(path, heartbeat, owner="pid 4242 on elsewhere"):
    storage.makedirs(path.rsplit("/", 1)[0])
    storage.write_atomically(path, json.dumps({"owner": owner, "token": "theirs", "heartbeat": heartbeat,
                                               "ttl_seconds": locks.LEASE_SECONDS}))


def test_a_fresh_lease_refuses_a_second_run_in_one_line(capsys):
    model_dir = f"ram://{uuid.uuid4().hex}/run"
    lease = storage.join(model_dir, model_dir_lib.LOCK_FILE)
    planted = time.time()
    plant(lease, planted - 5)
    assert train_main(TASK, ["--synthetic", "--model-dir", model_dir, "--max-steps", "1"]) == 1
    waited = time.time() - planted  # (a loaded machine takes a second or more to get there)
    err = capsys.readouterr().err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    ago = int(re.search(r"renewed (\d+) s ago", last).group(1))
    assert 5 <= ago <= 5 + waited + 1, last
    assert last == (
        f"{PROG}: error: another run (pid 4242 on elsewhere, renewed {ago} s ago) is using the model dir "
        f"{model_dir}; wait for it to finish (or, if it is gone, 60 s for its lease to expire), or pass another "
        "--model-dir")
    assert json.loads(storage.read_text(lease))["token"] == "theirs"  # left as it was
    assert storage.listdir(model_dir) == [model_dir_lib.LOCK_FILE]


def test_a_stale_lease_is_taken_over_renewed_and_removed():
    model_dir = f"ram://{uuid.uuid4().hex}/run"
    lease = storage.join(model_dir, model_dir_lib.LOCK_FILE)
    plant(lease, time.time() - 2 * locks.LEASE_SECONDS)
    with model_dir_lib.locked(model_dir):
        held = json.loads(storage.read_text(lease))
        assert held["host"] == socket.gethostname() and held["token"] != "theirs"
        with pytest.raises(UsageError, match="another run .* is using the model dir"):
            with model_dir_lib.locked(model_dir):  # a second run meanwhile: refused
                pass
    assert not storage.exists(lease)

    short = locks.Lease(lease, ttl=0.6, settle=0.05).acquire()  # renewed every 0.1 s
    first = json.loads(storage.read_text(lease))["heartbeat"]
    time.sleep(0.35)
    assert json.loads(storage.read_text(lease))["heartbeat"] > first
    waiter = locks.Lease(lease, settle=0.05)
    with pytest.raises(locks.LockHeld):
        waiter.acquire()
    short.release()
    waiter.acquire(wait=True, poll=0.05)  # a cluster's task waits, and gets it once free
    waiter.release()
    assert not storage.exists(lease)
