"""pipeline.initial_weights (--init-from): which checkpoint of another run's model dir a new run starts from,
and every weight of a Keras model set from it, by object-graph key or by name, averaged where it kept an
--ema shadow; a checkpoint of another model is refused naming the difference, and the other folder is never
written."""
import json
import os
import time
import types
import uuid

import numpy as np
import pytest
import tensorflow as tf

from acquisition import locks, storage
from models.optimizers import Adam
from pipeline import initial_weights
from pipeline.ema import shadow_key
from pipeline.errors import FlagError, UsageError
from pipeline.init_from import check_folder as check_init_from_folder
from pipeline.model_dir import LOCK_FILE
from pipeline.validation.record import VALIDATION_FILE


def small_model(seed, units=3, batch_norm=False, extra=False):
    """Returns a compiled Conv-(BatchNorm)-Dense(-Dense) model on 8x8x1 images, its weights drawn from `seed`;
    its layers named as a job's one model in a process is (a second model here would count on: conv2d_1)."""
    tf.keras.utils.set_random_seed(seed)
    layers = [tf.keras.Input((8, 8, 1), name="image"), tf.keras.layers.Conv2D(4, 3, name="conv")]
    layers += [tf.keras.layers.BatchNormalization(name="bn")] if batch_norm else []
    layers += [tf.keras.layers.Flatten(), tf.keras.layers.Dense(units, activation="softmax", name="head")]
    layers += [tf.keras.layers.Dense(3, activation="softmax", name="extra")] if extra else []
    model = tf.keras.Sequential(layers)
    model.compile(Adam(0.01), "categorical_crossentropy")
    if batch_norm:  # moving statistics of their own, as training leaves them
        bn = model.layers[1]
        bn.moving_mean.assign(np.full(4, 0.25 + seed, np.float32))
        bn.moving_variance.assign(np.full(4, 2.0 + seed, np.float32))
    return model


def write_checkpoint(prefix, tensors):
    """Writes a TensorFlow checkpoint of {key: value} at `prefix` (as the Estimator's Saver would)."""
    names = sorted(tensors)
    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names, shape_and_slices=[""] * len(names),
                      tensors=[tf.constant(tensors[n]) for n in names])


def object_checkpoint(model, prefix, shadows=None):
    """Writes `model`'s object-based checkpoint at `prefix`, with `shadows` ({raw key: value}) under ema/."""
    model.save_weights(prefix)
    reader = tf.train.load_checkpoint(prefix)
    tensors = {key: reader.get_tensor(key) for key in reader.get_variable_to_shape_map()}
    tensors.update({shadow_key(key): value for key, value in (shadows or {}).items()})
    for name in os.listdir(os.path.dirname(prefix)):
        if name.startswith(os.path.basename(prefix) + "."):
            os.remove(os.path.join(os.path.dirname(prefix), name))
    write_checkpoint(prefix, tensors)
    return tensors


def name_checkpoint(model, prefix):
    """Writes `model`'s weights by variable name at `prefix` (model_to_estimator's 'saver' format), with
    an optimizer slot and the global step beside them."""
    tensors = {w.name.split(":")[0]: w.numpy() for w in model.weights}
    tensors.update({"global_step": np.int64(7), "training/Adam/head/kernel/m": np.zeros(1, np.float32)})
    write_checkpoint(prefix, tensors)
    return tensors


def record_checkpoints(model_dir, *steps):
    tf.compat.v1.train.update_checkpoint_state(model_dir, f"model.ckpt-{steps[-1]}",
                                               all_model_checkpoint_paths=[f"model.ckpt-{s}" for s in steps])


def files_of(folder):
    return {os.path.relpath(os.path.join(d, f), folder): open(os.path.join(d, f), "rb").read()
            for d, _, files in os.walk(folder) for f in files}


def weights(model):
    return [w.numpy() for w in model.weights]


def initial(prefix, averaged=False):
    return initial_weights.InitialWeights(os.path.dirname(prefix), prefix, 1, initial_weights.NEWEST, averaged)


def test_an_object_based_checkpoint_sets_every_weight(tmp_path):
    source, target = small_model(1), small_model(2)
    object_checkpoint(source, str(tmp_path / "model.ckpt-1"))
    assert not all(np.array_equal(a, b) for a, b in zip(weights(source), weights(target)))
    assert initial_weights.load(target, initial(str(tmp_path / "model.ckpt-1"))) == 4
    for a, b in zip(weights(source), weights(target)):
        np.testing.assert_array_equal(a, b)


def test_the_ema_shadows_are_taken_where_the_checkpoint_kept_them(tmp_path):
    source, target = small_model(1), small_model(2)
    prefix = str(tmp_path / "model.ckpt-1")
    kernel_key = "layer_with_weights-1/kernel/.ATTRIBUTES/VARIABLE_VALUE"  # the Dense kernel's only
    averaged = np.full((144, 3), 0.5, np.float32)
    object_checkpoint(source, prefix, shadows={kernel_key: averaged})
    initial_weights.load(target, initial(prefix, averaged=True))
    np.testing.assert_array_equal(target.layers[-1].kernel.numpy(), averaged)
    np.testing.assert_array_equal(target.layers[-1].bias.numpy(), source.layers[-1].bias.numpy())  # no shadow: raw
    np.testing.assert_array_equal(target.layers[0].kernel.numpy(), source.layers[0].kernel.numpy())


def test_a_name_based_checkpoint_sets_the_batch_norm_statistics_too(tmp_path):
    source, target = small_model(1, batch_norm=True), small_model(2, batch_norm=True)
    name_checkpoint(source, str(tmp_path / "model.ckpt-1"))
    assert initial_weights.load(target, initial(str(tmp_path / "model.ckpt-1"))) == 8
    np.testing.assert_array_equal(target.layers[1].moving_mean.numpy(), np.full(4, 1.25, np.float32))
    np.testing.assert_array_equal(target.layers[1].moving_variance.numpy(), np.full(4, 3.0, np.float32))
    for a, b in zip(weights(source), weights(target)):
        np.testing.assert_array_equal(a, b)


def test_the_weights_are_set_in_graph_mode_as_a_cluster_task_builds_them(tmp_path):
    source = small_model(1)
    object_checkpoint(source, str(tmp_path / "model.ckpt-1"))
    expected = weights(source)
    with tf.Graph().as_default():
        target = small_model(2)
        initial_weights.load(target, initial(str(tmp_path / "model.ckpt-1")))
        got = target.get_weights()
    for a, b in zip(expected, got):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("other, words", [
    (dict(units=5), "(144, 5) there, (144, 3) here"),  # another number of classes
    (dict(extra=True), "it has a weight this model lacks (layer_with_weights-2/"),  # a deeper model
])
def test_a_checkpoint_of_another_model_is_refused_naming_the_difference(tmp_path, other, words):
    target = small_model(2)
    before = weights(target)
    object_checkpoint(small_model(1, **other), str(tmp_path / "model.ckpt-1"))
    with pytest.raises(FlagError, match="does not fit the model these flags build") as raised:
        initial_weights.load(target, initial(str(tmp_path / "model.ckpt-1")))
    assert words in str(raised.value)
    for a, b in zip(before, weights(target)):  # nothing set
        np.testing.assert_array_equal(a, b)


def test_a_misfit_names_the_flags_the_source_run_recorded_other_than_this_runs(tmp_path):
    object_checkpoint(small_model(1, extra=True), str(tmp_path / "model.ckpt-1"))
    generic = "pass the --model, --image-size and --channels it was trained with, on data of the same classes"
    with pytest.raises(FlagError, match=generic):
        initial_weights.load(small_model(2), initial(str(tmp_path / "model.ckpt-1")))  # no record
    runs = [{"start_step": 0, "model": "vgg16", "image_size": 224}, {"start_step": 4, "model": "resnet50",
                                                                      "image_size": 64}]
    (tmp_path / "training_progress.json").write_text(json.dumps({"task": "images", "runs": runs}))
    with pytest.raises(FlagError, match=r"it was trained with --model resnet50 --image-size 64 \(its "
                                        r"training_progress.json\): pass those, on data of the same classes"):
        initial_weights.load(small_model(2), initial(str(tmp_path / "model.ckpt-1")))  # the newest run's
    with pytest.raises(FlagError, match=r"it was trained with --model resnet50 \(its training_progress.json\): "
                                        "pass that,"):
        initial_weights.load(small_model(2), initial(str(tmp_path / "model.ckpt-1")),
                             types.SimpleNamespace(model="small_resnet", image_size=64, channels=3))
    with pytest.raises(FlagError, match=generic):  # the same flags: channels or classes differ, not these
        initial_weights.load(small_model(2), initial(str(tmp_path / "model.ckpt-1")),
                             types.SimpleNamespace(model="resnet50", image_size=64, channels=3))
    # A job without those flags (the Fashion job's) is not told to pass them.
    with pytest.raises(FlagError, match=r"\); pass the model dir of a run of this model$"):
        initial_weights.load(small_model(2), initial(str(tmp_path / "model.ckpt-1")), types.SimpleNamespace())
    with pytest.raises(FlagError, match=r"it is a run of the images job \(its training_progress.json\), and this "
                                        "fashion run builds another model; pass the model dir of a fashion run$"):
        initial_weights.load(small_model(2), initial(str(tmp_path / "model.ckpt-1")), types.SimpleNamespace(),
                             "fashion")
    (tmp_path / "training_progress.json").write_text(json.dumps({"task": "oct", "runs": runs}))
    with pytest.raises(FlagError, match=r"it is a run of the oct job .*; pass the model dir of an images run, or the "
                                        "--model/--image-size/--channels that build the oct job's model$"):
        initial_weights.load(small_model(2), initial(str(tmp_path / "model.ckpt-1")),
                             types.SimpleNamespace(model="small_resnet", image_size=64, channels=3), "images")
    for damaged in ("{", "[]", '{"runs": []}', '{"runs": [7]}', '{"runs": "x"}'):
        (tmp_path / "training_progress.json").write_text(damaged)
        assert initial_weights.other_model_flags(str(tmp_path)) == []


def test_a_name_based_checkpoint_without_a_weight_or_with_one_more_is_refused(tmp_path):
    name_checkpoint(small_model(1), str(tmp_path / "model.ckpt-1"))
    with pytest.raises(FlagError, match="it has no bn/gamma"):
        initial_weights.load(small_model(2, batch_norm=True), initial(str(tmp_path / "model.ckpt-1")))
    name_checkpoint(small_model(1, batch_norm=True), str(tmp_path / "model.ckpt-2"))
    with pytest.raises(FlagError, match=r"it has a weight this model lacks \(bn/"):
        initial_weights.load(small_model(2), initial(str(tmp_path / "model.ckpt-2")))


def test_a_run_trained_on_other_classes_is_refused(tmp_path):
    assert initial_weights.recorded_classes(str(tmp_path)) is None  # no results.json: nothing to compare
    initial_weights.check_same_classes(str(tmp_path), None, ["cat", "dog"])
    (tmp_path / "results.json").write_text(json.dumps({"class_names": ["cat", "dog"]}))
    theirs = initial_weights.recorded_classes(str(tmp_path))
    initial_weights.check_same_classes(str(tmp_path), theirs, ["cat", "dog"])
    with pytest.raises(FlagError, match="trained on the classes cat, dog, and this run's data has dog, cat"):
        initial_weights.check_same_classes(str(tmp_path), theirs, ["dog", "cat"])


def test_a_folder_another_run_is_training_in_is_refused_until_it_ends(tmp_path):
    source = tmp_path / "source"
    source.mkdir()
    object_checkpoint(small_model(1), str(source / "model.ckpt-5"))
    record_checkpoints(str(source), 5)
    held = locks.acquire(str(source / LOCK_FILE))
    try:
        with pytest.raises(UsageError, match=r"another run \(pid \d+ on .*\) is training there"):
            initial_weights.resolve(str(source))
    finally:
        locks.release(held)
    assert initial_weights.resolve(str(source)).step == 5


def test_a_url_folder_whose_run_renews_its_lease_is_refused(tmp_path):
    source = f"ram://{uuid.uuid4().hex}/source"
    storage.makedirs(source)

    def lease(age):
        storage.write_atomically(storage.join(source, LOCK_FILE), json.dumps(
            {"owner": "pid 4242 on elsewhere", "token": "theirs", "heartbeat": time.time() - age,
             "ttl_seconds": locks.LEASE_SECONDS}))
    lease(5)
    with pytest.raises(UsageError, match=r"another run \(pid 4242 on elsewhere, renewed 5 s ago\) is training there"):
        initial_weights.resolve(source)
    lease(2 * locks.LEASE_SECONDS)  # no longer renewed: its run is gone, and the folder is read (no checkpoint)
    with pytest.raises(FlagError, match="checkpoint"):
        initial_weights.resolve(source)
    assert json.loads(storage.read_text(storage.join(source, LOCK_FILE)))["token"] == "theirs"  # only read


def test_the_best_checkpoint_on_validation_is_chosen_over_newer_ones(tmp_path):
    source = tmp_path / "source"
    (source / "best").mkdir(parents=True)
    model = small_model(1)
    object_checkpoint(model, str(source / "model.ckpt-20"))
    object_checkpoint(model, str(source / "best" / "model.ckpt-10"), shadows={
        "layer_with_weights-1/bias/.ATTRIBUTES/VARIABLE_VALUE": np.zeros(3, np.float32)})
    record_checkpoints(str(source), 20)
    # Recorded where the model dir was before it moved: read under its own folder.
    (source / VALIDATION_FILE).write_text(json.dumps({"evaluations": [], "best": {
        "step": 10, "checkpoint": "/elsewhere/run/best/model.ckpt-10", "export_dir": None,
        "validation_accuracy": 0.5, "validation_loss": 1.0}}))
    chosen = initial_weights.resolve(str(source))
    assert chosen == initial_weights.InitialWeights(str(source), str(source / "best" / "model.ckpt-10"), 10,
                                                    initial_weights.BEST, True)
    assert "step 10, its best on validation, its --ema average" in chosen.describe()


def test_without_a_best_the_newest_readable_checkpoint_is_chosen_and_nothing_there_is_written(tmp_path):
    source = tmp_path / "source"
    source.mkdir()
    model = small_model(1)
    for step in (5, 10):
        object_checkpoint(model, str(source / f"model.ckpt-{step}"))
    record_checkpoints(str(source), 5, 10)
    with open(source / "model.ckpt-10.index", "r+b") as f:  # damaged
        f.truncate(10)
    before = files_of(str(source))
    chosen = initial_weights.resolve(str(source))
    assert (chosen.checkpoint, chosen.step, chosen.chosen, chosen.averaged) == \
        (str(source / "model.ckpt-5"), 5, initial_weights.NEWEST, False)
    assert files_of(str(source)) == before  # the damaged one is skipped, not set aside: another run's folder


def test_folders_that_cannot_give_weights_are_refused(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FlagError, match="holds no checkpoint"):
        initial_weights.resolve(str(empty))
    with pytest.raises(FlagError, match="no such folder"):
        initial_weights.resolve(str(tmp_path / "missing"))
    os.symlink(str(empty), str(tmp_path / "link"))
    for own in (str(empty) + "/", str(tmp_path / "link")):  # another spelling of the model dir, a link to it
        with pytest.raises(FlagError, match="this run's own --model-dir"):
            check_init_from_folder(types.SimpleNamespace(init_from=own, model_dir=str(empty)))
    with pytest.raises(FlagError, match="no such folder"):
        check_init_from_folder(types.SimpleNamespace(init_from=str(tmp_path / "missing"), model_dir=str(empty)))
    check_init_from_folder(types.SimpleNamespace(init_from="gs://b/missing", model_dir=str(empty)))  # read later
    (empty / "model.ckpt-5.index").write_bytes(b"")  # its checkpoint file lost: it resumes all the same
    check_init_from_folder(types.SimpleNamespace(init_from=str(tmp_path / "missing"), model_dir=str(empty)))
    (empty / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-5"\n')  # it resumes: the source unread
    check_init_from_folder(types.SimpleNamespace(init_from=str(tmp_path / "missing"), model_dir=str(empty)))


def test_an_unreadable_best_is_a_data_error_naming_it(tmp_path):
    source = tmp_path / "source"
    (source / "best").mkdir(parents=True)
    object_checkpoint(small_model(1), str(source / "best" / "model.ckpt-10"))
    (source / "best" / "model.ckpt-10.index").write_bytes(b"damaged")
    (source / VALIDATION_FILE).write_text(json.dumps({"evaluations": [], "best": {
        "step": 10, "checkpoint": str(source / "best" / "model.ckpt-10"), "export_dir": None,
        "validation_accuracy": 0.5, "validation_loss": 1.0}}))
    with pytest.raises(UsageError, match="its best checkpoint .*model.ckpt-10 cannot be read") as raised:
        initial_weights.resolve(str(source))
    assert not isinstance(raised.value, FlagError)  # exit 1: the data, not the flag


def test_another_model_than_the_source_run_recorded_is_refused_before_any_model_is_built(tmp_path):
    runs = [{"start_step": 0, "model": "vgg16"}, {"start_step": 4, "model": "small_resnet"}]
    (tmp_path / "training_progress.json").write_text(json.dumps({"task": "images", "runs": runs}))
    initial_weights.check_same_model(str(tmp_path), types.SimpleNamespace(model="small_resnet"))  # the newest run's
    initial_weights.check_same_model(str(tmp_path / "no-record"), types.SimpleNamespace(model="vgg16"))
    initial_weights.check_same_model(str(tmp_path), types.SimpleNamespace())  # a job without --model
    with pytest.raises(FlagError, match=rf"^--init-from {tmp_path} was trained with --model small_resnet \(its "
                                        r"training_progress.json\), and this run builds --model vgg16, which its "
                                        r"weights cannot fit; pass --model small_resnet, or another"):
        initial_weights.check_same_model(str(tmp_path), types.SimpleNamespace(model="vgg16"))
