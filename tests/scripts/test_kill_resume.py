"""kill -9 of a training run at a random moment, then the same command again."""
import json
import os
import random
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import tensorflow as tf

from tests.conftest import ROOT


def kill_at_random_and_rerun(data_dir, model_dir, delay):
    """Starts a run, kills it with SIGKILL `delay` seconds after its first checkpoint past step 0,
    reruns the same command and checks that it resumed from the newest checkpoint and finished."""
    command = [sys.executable, os.path.join(ROOT, "scripts", "train_fashion.py"), "--data-dir", data_dir,
               "--model-dir", str(model_dir), "--batch-size", "32", "--max-steps", "300",
               "--checkpoint-steps", "25", "--eval-every-steps", "100"]  # kills land in evaluations too
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while tf.train.latest_checkpoint(str(model_dir)) in (None, str(model_dir / "model.ckpt-0")):
        assert process.poll() is None and time.monotonic() < deadline, "no checkpoint before the run ended"
        time.sleep(0.05)
    time.sleep(delay)  # anywhere in the run, a checkpoint write included
    assert process.poll() is None, "the run ended before it was killed"
    process.send_signal(signal.SIGKILL)
    process.wait()

    killed_at = tf.train.latest_checkpoint(str(model_dir))
    reader = tf.train.load_checkpoint(killed_at)  # the newest checkpoint is whole and loadable
    assert reader.get_variable_to_shape_map()
    rerun = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    results = json.loads((model_dir / "results.json").read_text())
    assert results["start_global_step"] == int(killed_at.rsplit("-", 1)[1]) > 0
    assert results["global_step"] == 300
    assert tf.train.latest_checkpoint(str(model_dir)).endswith("model.ckpt-300")


def test_kill_9_then_rerun_resumes_and_ends_exactly_at_the_final_step(fashion_data_dir, tmp_path):
    rng = random.Random(7)
    delays = [rng.uniform(0.0, 1.0) for _ in range(3)]
    # Three runs of their own at once: their start-ups, evaluations and reports overlap.
    with ThreadPoolExecutor(len(delays)) as pool:
        attempts = [pool.submit(kill_at_random_and_rerun, fashion_data_dir, tmp_path / f"run{i}", delay)
                    for i, delay in enumerate(delays)]
        for attempt in attempts:
            attempt.result()
