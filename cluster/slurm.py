"""A Slurm job step as a TF_CONFIG cluster: rank 0 is the chief, the next ranks the parameter
servers (if any), the rest workers; ports count up from a base on each node."""
import os
import shutil

from cluster.tf_config import ClusterConfigError

_STEP_VARIABLES = ("SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_STEP_NODELIST", "SLURM_STEP_TASKS_PER_NODE")


def slurm_tf_config(port_base=8888, ps=0, environ=None):
    """Returns the TF_CONFIG dict of this task of the Slurm job step the environment describes.

    The cluster comes from tf.distribute.cluster_resolver.SlurmClusterResolver.
    GPUs: a task keeps the CUDA_VISIBLE_DEVICES Slurm gave it (--gpus-per-task,
    --gres binding); otherwise, where nvidia-smi lists GPUs, the resolver splits
    the node's GPUs between its tasks and sets CUDA_VISIBLE_DEVICES. Raises
    ClusterConfigError outside a job step or when the step cannot hold the cluster.
    """
    environ = os.environ if environ is None else environ
    missing = [name for name in _STEP_VARIABLES if name not in environ]
    if missing:
        raise ClusterConfigError(f"--cluster slurm runs inside a Slurm job step, but {', '.join(missing)} "
                                 "is not set; start the command with srun (see scripts/slurm/train.sbatch)")
    tasks = int(environ["SLURM_STEP_NUM_TASKS"])
    if tasks < 2 + ps:
        raise ClusterConfigError(f"--cluster slurm with {ps} parameter server(s) needs at least {2 + ps} tasks "
                                 f"(a chief, a worker{', the ps' if ps else ''}); the step has {tasks}: "
                                 "raise srun's --ntasks")
    jobs = {"chief": 1, "ps": ps, "worker": tasks - 1 - ps}
    from tensorflow.python.distribute.cluster_resolver import slurm_cluster_resolver as slurm  # noqa: PLC0415
    saved = {name: os.environ.get(name) for name in _STEP_VARIABLES}
    os.environ.update({name: environ[name] for name in _STEP_VARIABLES})  # the resolver reads os.environ
    try:
        allotted = "CUDA_VISIBLE_DEVICES" in environ or shutil.which("nvidia-smi") is None
        resolver = slurm.SlurmClusterResolver(
            jobs={job: n for job, n in jobs.items() if n}, port_base=port_base, auto_set_gpu=not allotted,
            # Slurm allotted the GPUs already (or there are none): a placeholder of one per task.
            gpus_per_node=tasks if allotted else None, gpus_per_task=1 if allotted else None)
        cluster = resolver.cluster_spec().as_dict()
        task_type, index = resolver.get_task_info()
    except (RuntimeError, ValueError) as e:
        raise ClusterConfigError(f"Slurm's job step does not describe a usable cluster: {e}") from None
    finally:
        if environ is not os.environ:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
    return {"cluster": cluster, "task": {"type": task_type, "index": index}}
