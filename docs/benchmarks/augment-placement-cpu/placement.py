"""Where augmentation runs faster on this CPU: in the model_fn (the pipeline's choice) or in the
training input_fn (a tf.data map after batching). Fashion CNN on the shipped sample, 1 replica,
batch 64; images/sec over 150 timed steps, 3 interleaved repeats."""
import os
import sys
import tempfile

sys.path.insert(0, "/work/main")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf  # noqa: E402

from hooks.examples_per_second import ExamplesPerSecondHook  # noqa: E402
from acquisition.fashion_mnist import prepare_shards  # noqa: E402
from input_fns import fashion_mnist  # noqa: E402
from input_fns.augmentation import augment  # noqa: E402
from models.fashion_cnn import build_fashion_cnn  # noqa: E402
from pipeline import estimator as estimator_lib  # noqa: E402
from pipeline.distribution import build_distribution  # noqa: E402
from pipeline.machine import describe_cpu  # noqa: E402
from pipeline.tasks import FEATURE_KEY  # noqa: E402

T = [("flip", "horizontal"), ("rotate", 10.0), ("zoom", 0.1), ("translate", 0.1), ("contrast", 0.2)]
BATCH, WARM, TIMED = 64, 20, 150
splits = prepare_shards("/tmp/aug-fashion", None)
base = fashion_mnist.make_input_fn(splits["train"]["pattern"], BATCH, training=True, feature_key=FEATURE_KEY, seed=0)


def in_input(input_context=None):
    def one(step, element):
        features, labels = element
        return {FEATURE_KEY: augment(features[FEATURE_KEY], T, 0, step, 0)}, labels
    return base(input_context).enumerate().map(one, num_parallel_calls=tf.data.AUTOTUNE).prefetch(2)


def measure(where):
    plan = build_distribution(cpu_replicas=None)
    config = estimator_lib.build_run_config(tempfile.mkdtemp(), plan, checkpoint_steps=100000, summary_steps=100000)
    estimator = estimator_lib.estimator_from_keras(build_fashion_cnn(1e-3, input_name=FEATURE_KEY), config,
                                              augment=T if where == "model_fn" else ())
    hook = ExamplesPerSecondHook(BATCH, every_n_steps=10 ** 9, warm_up_steps=WARM)
    estimator.train(in_input if where == "input_fn" else base, hooks=[hook], max_steps=WARM + TIMED)
    return hook.summary()["images_per_sec"]


print(describe_cpu())
rows = {w: [] for w in ("none", "model_fn", "input_fn")}
for repeat in range(3):
    for where in rows:
        rows[where].append(measure(where))
        print(where, repeat, round(rows[where][-1], 1), flush=True)
for where, figures in rows.items():
    mean = sum(figures) / len(figures)
    print(f"{where}: mean {mean:.0f} images/sec, {min(figures):.0f}-{max(figures):.0f}; "
          f"/ none {mean / (sum(rows['none']) / 3):.3f}")
