"""Which GPUs TensorFlow sees: set in the environment before it starts, since it reads CUDA_VISIBLE_DEVICES
once. Nothing here imports TensorFlow."""
import os

CUDA_VISIBLE = "CUDA_VISIBLE_DEVICES"


def visible_gpus(gpus, cpu_replicas, current, evaluator=False):
    """Returns the CUDA_VISIBLE_DEVICES that shows TensorFlow only the GPUs a run trains on, given the one set
    now (`current`, None: unset, every GPU): none for --cpu-replicas or --gpus 0, the first N it lists for
    --gpus N; or `current` where neither flag narrows it (no --gpus: every GPU; more than it lists: the run
    says how many it sees). Hidden GPUs get no memory reserved and no op placed on them: TensorFlow creates
    every GPU it sees in each session and reserves nearly all of its memory, and an op a single-device run
    places on no device goes to GPU 0 (tf.config.set_visible_devices reaches the eager context, not the
    Estimator's sessions, which are given their own config). A cluster's `evaluator` evaluates on one device:
    under --gpus N (the trainers' count, which it reads from the flag) it is shown the first GPU alone."""
    if cpu_replicas is not None or gpus == 0:
        return "-1"
    if gpus is None:
        return current
    if evaluator:
        gpus = 1
    if current is None:
        return ",".join(str(index) for index in range(gpus))
    listed = [name.strip() for name in current.split(",")]
    return ",".join(listed[:gpus]) if len(listed) >= gpus else current


def narrow_visible_gpus(gpus, cpu_replicas, evaluator=False):
    """Sets CUDA_VISIBLE_DEVICES to visible_gpus' answer for `--gpus` / `--cpu-replicas` (unchanged where it
    leaves it) for a task that trains, or a cluster's `evaluator`; to be called before TensorFlow's runtime
    starts."""
    shown = visible_gpus(gpus, cpu_replicas, os.environ.get(CUDA_VISIBLE), evaluator)
    if shown is not None:
        os.environ[CUDA_VISIBLE] = shown
