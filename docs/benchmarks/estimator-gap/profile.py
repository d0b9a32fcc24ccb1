"""Per-op time of one training step of the Estimator (a TF 1 session) and of Keras fit
(a tf.function), both traced by the TF 2 profiler (tf.profiler.experimental), same model and batch.

Run from the repository root: python docs/benchmarks/estimator-gap/profile.py [--batch 512]
[--precision fp32|bf16] [--steps 5] [--rounds 2]. Prints, for each engine, the mean op time per
traced step by op type, and the op types whose time differs most between the two.
"""
import argparse
import collections
import glob
import os
import sys
import tempfile
import time

sys.path.insert(0, os.getcwd())
import tensorflow as tf  # noqa: E402
from tensorflow.tsl.profiler.protobuf import xplane_pb2  # noqa: E402

from input_fns import fashion_mnist, synthetic  # noqa: E402
from models.fashion_cnn import build_fashion_cnn  # noqa: E402
from models.optimizers import precision  # noqa: E402
from pipeline.estimator import estimator_from_keras, build_run_config  # noqa: E402
from pipeline.distribution import build_distribution  # noqa: E402
from pipeline.tasks import FEATURE_KEY  # noqa: E402

WARM_UP = 10


def by_op_type(logdir):
    """Returns ({op type: microseconds}, {op type: count}) summed over the TF ops that the TF 2
    profiler recorded in `logdir` (events named 'node:OpType' on the executor's threads)."""
    path = sorted(glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True))[-1]
    space = xplane_pb2.XSpace()
    with open(path, "rb") as f:
        space.ParseFromString(f.read())
    times, counts = collections.Counter(), collections.Counter()
    for plane in space.planes:
        for line in plane.lines:
            if line.name == "python":
                continue
            for event in line.events:
                name = plane.event_metadata[event.metadata_id].name
                if ":" not in name or "::" in name or name.startswith("Memory"):
                    continue
                kind = name.rsplit(":", 1)[1]
                times[kind] += event.duration_ps / 1e6
                counts[kind] += 1
    return times, counts


class _Tracer:
    """Starts the TF 2 profiler before timed step WARM_UP + 1 and stops it after the last one."""

    def __init__(self, steps):
        self.steps, self.walls, self.logdir, self._n = steps, [], tempfile.mkdtemp(), 0

    def begin_step(self):
        self._n += 1
        if self._n == WARM_UP + 1:
            tf.profiler.experimental.start(self.logdir)
        self._start = time.perf_counter()

    def end_step(self):
        if self._n > WARM_UP:
            self.walls.append(time.perf_counter() - self._start)
        if self._n == WARM_UP + self.steps:
            tf.profiler.experimental.stop()


class _TraceHook(tf.estimator.SessionRunHook):
    def __init__(self, tracer):
        self.tracer = tracer

    def before_run(self, run_context):
        self.tracer.begin_step()

    def after_run(self, run_context, run_values):
        self.tracer.end_step()


class _TraceCallback(tf.keras.callbacks.Callback):
    def __init__(self, tracer):
        super().__init__()
        self.tracer = tracer

    def on_train_batch_begin(self, batch, logs=None):
        self.tracer.begin_step()

    def on_train_batch_end(self, batch, logs=None):
        self.tracer.end_step()


def model():
    """Returns the compiled Fashion CNN, as fashion_job builds it."""
    return build_fashion_cnn(1e-3, input_shape=fashion_mnist.IMAGE_SHAPE, num_classes=10, input_name=FEATURE_KEY)


def input_fn(batch):
    """Returns the synthetic training input_fn: one generated batch, repeated."""
    return synthetic.make_input_fn(fashion_mnist.IMAGE_SHAPE, 10, batch, True, feature_key=FEATURE_KEY)


def estimator_step(batch, steps):
    plan = build_distribution(cpu_replicas=None)
    tracer = _Tracer(steps)
    with tempfile.TemporaryDirectory() as model_dir:
        config = build_run_config(model_dir, plan, checkpoint_steps=10 ** 9, summary_steps=10 ** 9)
        estimator_from_keras(model(), config).train(input_fn(batch), hooks=[_TraceHook(tracer)],
                                                    max_steps=WARM_UP + steps)
    return tracer


def keras_step(batch, steps):
    tracer = _Tracer(steps)
    model().fit(input_fn(batch)(), steps_per_epoch=WARM_UP + steps, epochs=1, verbose=0,
                     callbacks=[_TraceCallback(tracer)])
    return tracer


def mean_by_type(tracers):
    times, counts = collections.Counter(), collections.Counter()
    for tracer in tracers:
        t, c = by_op_type(tracer.logdir)
        times.update(t)
        counts.update(c)
    steps = sum(t.steps for t in tracers)
    return {k: v / steps for k, v in times.items()}, {k: v / steps for k, v in counts.items()}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    results = collections.defaultdict(list)
    with precision(args.precision):
        for _ in range(args.rounds):
            for name, run in (("estimator", estimator_step), ("keras", keras_step)):
                results[name].append(run(args.batch, args.steps))
    summary = {}
    for name, runs in results.items():
        walls = [w for run in runs for w in run.walls]
        times, counts = mean_by_type(runs)
        summary[name] = times, counts
        print(f"{name}: traced steps {len(walls)}, wall ms/step (traced) {1000 * sum(walls) / len(walls):.1f}, "
              f"op ms/step {sum(times.values()) / 1000:.1f}, ops/step {sum(counts.values()):.0f}")
    (et, ec), (kt, kc) = summary["estimator"], summary["keras"]
    print(f"{'op type':45s} {'est ms':>8s} {'keras ms':>8s} {'diff':>7s} {'est n':>6s} {'keras n':>7s}")
    for op in sorted(set(et) | set(kt), key=lambda k: -abs(et.get(k, 0) - kt.get(k, 0))):
        print(f"{op:45s} {et.get(op, 0) / 1000:8.2f} {kt.get(op, 0) / 1000:8.2f} "
              f"{(et.get(op, 0) - kt.get(op, 0)) / 1000:7.2f} {ec.get(op, 0):6.0f} {kc.get(op, 0):7.0f}")


if __name__ == "__main__":
    main()
