"""--augment changes what trains and nothing that serves: only the training graph holds its ops,
the export answers the same with it on or off, and a resumed run draws what a straight one would."""
import os

import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2

from input_fns import synthetic
from input_fns.augmentation import augment
from models.fashion_cnn import build_fashion_cnn
from pipeline import estimator as estimator_lib
from pipeline.distribution import build_distribution
from pipeline.flags import build_parser
from pipeline.roles import run
from pipeline.tasks import FEATURE_KEY, fashion, oct as oct_task
from serving.export import export_model
from serving.predict import load_predictor
from tests.conftest import OCT_SAMPLE

ALL = "flip,rotate=10,zoom=0.1,translate=0.1,contrast=0.2"
TRANSFORMS = build_parser(fashion.TASK).parse_args(["--augment", ALL]).augment


def graph_ops(mode, transforms):
    """Returns the op types and names of the model_fn's graph in `mode`."""
    with tf.Graph().as_default() as graph:
        tf.compat.v1.train.create_global_step()
        model = build_fashion_cnn(1e-3, input_name=FEATURE_KEY)
        config = tf.estimator.RunConfig(model_dir=None)
        estimator = estimator_lib.estimator_from_keras(model, config, augment=transforms)
        features = {FEATURE_KEY: tf.zeros((4, 28, 28, 1))}
        estimator._model_fn(features, tf.zeros((4, 10)), mode)
        return {(op.type, op.name) for op in graph.get_operations()}


def test_only_the_training_graph_holds_the_augmentation():
    trained = graph_ops(tf.estimator.ModeKeys.TRAIN, TRANSFORMS)
    assert any(t == "ImageProjectiveTransformV3" for t, _ in trained)
    assert any(name.startswith("augmentation/") for _, name in trained)
    evaluated = graph_ops(tf.estimator.ModeKeys.EVAL, TRANSFORMS)
    assert not any(name.startswith("augmentation/") or t == "ImageProjectiveTransformV3" for t, name in evaluated)


def random_or_transform_ops(export_dir):
    """Returns the export's random and image-transform ops outside the variables' initialisers."""
    saved = saved_model_pb2.SavedModel()
    with open(os.path.join(export_dir, "saved_model.pb"), "rb") as f:
        saved.ParseFromString(f.read())
    graph = saved.meta_graphs[0].graph_def
    nodes = list(graph.node) + [n for function in graph.library.function for n in function.node_def]
    return [n.name for n in nodes if ("Random" in n.op or "ImageProjectiveTransform" in n.op
                                      or n.name.startswith("augmentation/")) and "Initializer" not in n.name]


def test_the_export_serves_the_same_with_augment_on_and_off(tmp_path):
    # Batch 44: the synthetic test split's 968 scans are evaluated in 22 steps (in 242 at batch 4).
    args = build_parser(oct_task.TASK).parse_args(
        ["--synthetic", "--image-size", "32", "--weights", "none", "--batch-size", "44", "--max-steps", "2",
         "--bootstrap-resamples", "10", "--augment", ALL, "--precision", "fp32",  # fp32: as rebuilt below
         "--model-dir", str(tmp_path / "m")])
    with_augment = run(oct_task.TASK, args)["export_dir"]
    assert random_or_transform_ops(with_augment) == []
    # The same weights exported by an Estimator built without --augment.
    data = oct_task.TASK.prepare_data(args, args.batch_size)
    plain = estimator_lib.estimator_from_keras(oct_task.TASK.build_model(args, 1e-4),
                                          tf.estimator.RunConfig(model_dir=str(tmp_path / "m")), data.class_names)
    without = export_model(plain, data.serving_input_fn, data.class_names, str(tmp_path / "plain-export"))
    scan = open(os.path.join(OCT_SAMPLE, "DME", sorted(os.listdir(os.path.join(OCT_SAMPLE, "DME")))[0]), "rb").read()
    answers = [load_predictor(with_augment).classify([scan])[0] for _ in range(3)]
    answers.append(load_predictor(without).classify([scan])[0])
    assert all(np.array_equal(answers[0], a) for a in answers[1:])


class CaptureAugmented(tf.estimator.SessionRunHook):
    """Keeps the first replica's augmented batch of global step `step`."""

    def __init__(self, step):
        self.step, self.batch = step, None

    def before_run(self, run_context):
        graph = tf.compat.v1.get_default_graph()
        return tf.estimator.SessionRunArgs((tf.compat.v1.train.get_global_step(),
                                            graph.get_tensor_by_name("augmentation/augmented:0")))

    def after_run(self, run_context, run_values):
        step, images = run_values.results
        if step == self.step:
            self.batch = images


def train(model_dir, max_steps, hooks=()):
    plan = build_distribution(cpu_replicas=2)
    config = estimator_lib.build_run_config(model_dir, plan, checkpoint_steps=1, summary_steps=100, seed=3)
    estimator = estimator_lib.estimator_from_keras(build_fashion_cnn(1e-3, input_name=FEATURE_KEY), config,
                                              augment=TRANSFORMS, augment_seed=11)
    input_fn = synthetic.make_input_fn((28, 28, 1), 10, 8, True)  # one batch, repeated
    estimator.train(input_fn, hooks=list(hooks), max_steps=max_steps)


def test_a_resumed_run_draws_what_a_straight_run_draws(tmp_path):
    straight = CaptureAugmented(4)
    train(str(tmp_path / "straight"), 6, [straight])
    train(str(tmp_path / "resumed"), 3)  # stopped after step 3 (steps 0, 1, 2 trained)
    resumed = CaptureAugmented(4)
    train(str(tmp_path / "resumed"), 6, [resumed])
    assert straight.batch is not None and np.array_equal(straight.batch, resumed.batch)
    # ... and those are step 4's draws, on replica 0, from seed 11 (not step 0's, replayed).
    images = synthetic.make_input_fn((28, 28, 1), 10, 8, True)().take(1).get_single_element()[0][FEATURE_KEY]
    assert np.allclose(straight.batch, augment(images, TRANSFORMS, 11, 4, 0).numpy(), atol=1e-6)
    assert not np.allclose(straight.batch, augment(images, TRANSFORMS, 11, 0, 0).numpy(), atol=1e-6)
