"""The flags of where a job runs: devices, strategy, precision, threads, and the cluster. Nothing here imports TensorFlow."""
from models import PRECISIONS
from pipeline.flag_types import int_in_range, non_negative_int, positive_int


CONV_GRADIENTS = ("auto", "onednn", "matmul")
STRATEGIES = ("mirrored", "central_storage", "multi_worker_mirrored", "parameter_server")
# Logical CPU devices test the multi-replica path; each is a device of its own in TensorFlow, and
# a thousand of them took 12 GB and a quarter of an hour to set up, deaf to stop signals.
MAX_CPU_REPLICAS = 64


def add_device_flags(parser):
    """Adds the devices group; returns it."""
    devices = parser.add_argument_group("devices")
    replicas = devices.add_mutually_exclusive_group()  # argparse refuses both, exit 2
    replicas.add_argument("--gpus", type=non_negative_int, default=None,
                         help="mirror training over the first N GPUs (NCCL all-reduce); "
                              "default: every visible GPU, or the CPU when there is none")
    replicas.add_argument("--cpu-replicas", type=int_in_range(1, MAX_CPU_REPLICAS), default=None,
                         help=f"mirror training over N logical CPU devices instead of GPUs, up to "
                              f"{MAX_CPU_REPLICAS} (tests the multi-replica path without a GPU)")

    devices.add_argument("--strategy", choices=STRATEGIES, default="mirrored",
                         help="one machine: 'mirrored' (a copy of the variables on each replica) or "
                              "'central_storage' (variables on the CPU, compute mirrored over the replicas); "
                              "'multi_worker_mirrored' (synchronous) or 'parameter_server' (asynchronous): the "
                              "cluster that TF_CONFIG describes (see scripts/launch_local_cluster.py)")
    devices.add_argument("--precision", choices=tuple(PRECISIONS) + ("auto",), default="auto",
                         help="'auto' (the default) picks bf16 where the devices compute it natively (CPUs with "
                              "AVX512_BF16 or AMX, GPUs from compute capability 8.0), fp32 elsewhere, and the "
                              "header says which and why; 'fp32'; or mixed precision, variables in float32 and "
                              "math in 'bf16' or 'fp16' (GPUs, with dynamic loss scaling); the softmax and the "
                              "loss stay float32. 'bf16-amp': a float32 model whose eligible ops TensorFlow's "
                              "oneDNN graph rewrite runs in bfloat16 (CPUs with AVX-512). docs/benchmarks.md has "
                              "what each measured")
    devices.add_argument("--conv-gradients", choices=CONV_GRADIENTS, default="auto",
                         help="how a 3x3 convolution's weight gradient is computed where the layer has 64 or more "
                              "input channels and at most 14x14 output positions: 'matmul' (one matrix product), "
                              "'onednn' (TensorFlow's kernel), or 'auto' (the default): matmul when training in "
                              "bfloat16 on a CPU with AMX, where it measured 1.2-4.9x faster, onednn elsewhere")
    devices.add_argument("--xla", action="store_true",
                         help="compile the training graph with XLA (often faster on GPUs; slower on the CPUs "
                              "measured, see docs/benchmarks.md)")
    devices.add_argument("--intra-op-threads", type=non_negative_int, default=0,
                         help="threads one operation may use (0: TensorFlow's choice, the cores)")
    devices.add_argument("--inter-op-threads", type=non_negative_int, default=0,
                         help="operations run at once (0: TensorFlow's choice)")
    return devices


def add_cluster_flags(parser):
    """Adds the cluster group (waits, timeouts, Slurm, the evaluator's throttle); returns it."""
    cluster = parser.add_argument_group("cluster")
    cluster.add_argument("--cluster-wait-secs", type=positive_int, default=600,
                         help="in a cluster: give up, with one line naming the tasks that do not answer, when "
                              "training has not started after this long")
    cluster.add_argument("--peer-timeout-secs", type=int_in_range(5, 120), default=60,
                         help="in a cluster: a task whose peer stays killed or silent (stopped, cut off) this long "
                              "ends with one line and exit 200, which schedulers retry; relaunch every task "
                              "to resume")
    cluster.add_argument("--cluster", choices=("tf_config", "slurm"), default="tf_config",
                         help="where the cluster comes from: the TF_CONFIG variable, or 'slurm': the srun job step "
                              "(rank 0 the chief, then --slurm-ps parameter servers, the rest workers)")
    cluster.add_argument("--slurm-port-base", type=int_in_range(1024, 65000), default=8888,
                         help="with --cluster slurm: the first task on each node listens on this port, the next "
                              "on the one above, ...")
    cluster.add_argument("--slurm-ps", type=non_negative_int, default=0,
                         help="with --cluster slurm: how many tasks, after the chief, are parameter servers")
    cluster.add_argument("--eval-throttle-secs", type=positive_int, default=10,
                         help="in a cluster with an evaluator task: least seconds between its evaluations")
    return cluster
