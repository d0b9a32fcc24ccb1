"""The OCT job: its prepared shards (the scans decoded as training decodes them, in the manifest's order), its cache, and a resume's validation list and undecodable scans."""
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from acquisition import retinal_oct
from acquisition import image_checks
from input_fns import decode, records
from pipeline.tasks import oct_job


def test_prepared_shards_hold_the_decoded_scans_and_are_reused_until_a_scan_changes(oct_tree, tmp_path):
    out, data_dir = str(tmp_path / "records"), str(tmp_path / "data")
    oct_tree = shutil.copytree(oct_tree, os.path.join(data_dir, "OCT2017"))  # one scan is touched below
    manifest, reused = oct_job.prepare_records(data_dir, out, 32, num_shards=(3, 2))
    assert not reused and manifest["class_names"] == list(retinal_oct.CLASS_NAMES)
    test = manifest["splits"]["test"]
    input_fn = records.make_image_records_input_fn(test["pattern"], (32, 32, 1), 4, 8, False, "image")
    images, labels = zip(*[(f["image"], l) for f, l in input_fn().as_numpy_iterator()])
    images, labels = np.concatenate(images), np.concatenate(labels).argmax(1)
    assert images.dtype == np.uint8 and images.shape == (24, 32, 32, 1)
    assert labels.tolist() == test["labels_in_order"]
    files, _ = image_checks.scan_folder(retinal_oct.split_pattern(oct_tree, "test"), retinal_oct.CLASS_NAMES).good()
    order = [i for s in range(2) for i in range(len(files))[s::2]]  # round-robin shards, read in turn
    for i in (0, 23):
        np.testing.assert_array_equal(
            images[i], decode.decode_and_resize(tf.io.read_file(files[order[i]]), (32, 32)).numpy())
    assert manifest["splits"]["train"]["count"] == 105 and manifest["splits"]["train"]["num_shards"] == 3
    assert oct_job.prepare_records(data_dir, out, 32, num_shards=(3, 2))[1]  # reused
    os.utime(files[0], ns=(0, 0))  # a scan replaced: made anew
    assert not oct_job.prepare_records(data_dir, out, 32, num_shards=(3, 2))[1]
    from pipeline.errors import FlagError
    from pipeline.flags import build_parser
    from pipeline.tasks.oct import TASK
    other_size = build_parser(TASK).parse_args(["--records-dir", out, "--image-size", "64"])
    with pytest.raises(FlagError, match=f"the shards in {out} hold 32-pixel images; pass --image-size 32 or prepare"):
        oct_job.prepare_data(other_size, 4)  # a flag the data contradicts: exit 2, as a model dir's would be (was 1)


def test_calibrating_on_shards_names_the_folders_not_a_validation_fraction_the_shards_refuse(tmp_path):
    """It said 'give it one (--validation-fraction above 0)', which the shards then refused."""
    import pytest
    from pipeline.errors import FlagError
    from pipeline.flags import build_parser
    from pipeline.tasks.oct import TASK
    args = build_parser(TASK).parse_args(["--records-dir", str(tmp_path), "--calibrate", "temperature"])
    with pytest.raises(FlagError, match=r"--calibrate needs the validation split, and --records-dir's shards hold "
                                        r"no file names, .* train on the JPEG folders \(--data-dir\) for one, or drop "
                                        "--calibrate$"):
        oct_job.prepare_data(args, 4)


def test_reduced_decoding_of_shards_decoded_in_full_is_refused(tmp_path):
    """The export would have decoded files reduced while training read scans decoded in full."""
    import pytest
    from pipeline.errors import FlagError
    from pipeline.flags import build_parser
    from pipeline.tasks.oct import TASK
    args = build_parser(TASK).parse_args(["--records-dir", str(tmp_path), "--decode", "reduced"])
    with pytest.raises(FlagError, match="--decode reduced decodes JPEG files, and --records-dir's shards hold scans "
                                        "decoded in full"):
        oct_job.prepare_data(args, 4)


def test_one_cache_for_every_spelling_of_the_data_dir(oct_tree, tmp_path, monkeypatch):
    """oct/, ./oct and the absolute path each wrote a cache of their own (4.2 GB each at full size)."""
    import glob
    from pipeline.flags import build_parser
    from pipeline.tasks.oct import TASK
    data = os.path.dirname(oct_tree)
    os.symlink(data, tmp_path / "linked")
    monkeypatch.chdir(tmp_path)
    for spelling in (data, data + "/", "linked", "./linked/OCT2017"):
        args = build_parser(TASK).parse_args(["--data-dir", spelling, "--model-dir", str(tmp_path / "m"),
                                              "--image-size", "32", "--cache", str(tmp_path / "cache"),
                                              "--validation-fraction", "0"])
        oct_job.prepare_data(args, 4).train_input_fn()  # names its cache file (and writes what it holds)
    assert len(glob.glob(str(tmp_path / "cache" / "images-*.json"))) == 1


def test_a_trained_model_dir_holds_out_its_listed_scans_and_leaves_out_the_scans_it_could_not_decode(oct_tree, tmp_path):
    """The OCT job's side of a resume after an undecodable scan (the images job's is run whole in
    test_train_images_cli): the model dir's record makes the scan a bad file, and its validation list, not a new
    draw, says which scans are held out."""
    from acquisition import undecodable_record
    from acquisition.errors import InputDataError
    from pipeline.flags import build_parser
    from pipeline.tasks.oct import TASK
    from pipeline.undecodable import RECORD_FILE
    model_dir = tmp_path / "m"
    model_dir.mkdir()

    def prepare(*flags):
        return oct_job.prepare_data(build_parser(TASK).parse_args(
            ["--data-dir", os.path.dirname(oct_tree), "--model-dir", str(model_dir), "--image-size", "32", *flags]), 4)
    drawn = prepare()
    trained = [f for f in retinal_oct_files(oct_tree, "train") if f not in drawn.validation_files]
    listed = sorted(drawn.validation_files)[1:] + [trained[0]]  # not the draw's: a list of an earlier version's
    (model_dir / "validation_files.txt").write_text("".join(f + "\n" for f in listed))
    assert sorted(prepare().validation_files) == sorted(drawn.validation_files)  # no checkpoint: drawn
    (model_dir / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-5"\n')
    resumed = prepare()
    assert sorted(resumed.validation_files) == sorted(listed)
    assert resumed.num_train_examples == drawn.num_train_examples
    tested = retinal_oct_files(oct_tree, "test")[0]
    undecodable_record.remember(str(model_dir / RECORD_FILE), {trained[1]: "Invalid JPEG data",
                                                                tested: "Invalid JPEG data", listed[0]: None})
    first = min(trained[1], tested, listed[0])
    with pytest.raises(InputDataError, match=f"^{first} cannot be decoded .*, though its header reads well \\(a run "
                                             "of this model dir met it: .*\\(and 2 more bad files\\)"):
        prepare()
    skipped = prepare("--on-bad-image", "skip")
    assert sorted(skipped.report["skipped_files"]) == sorted([trained[1], tested, listed[0]])
    # only a training scan counts as one fewer to train on (a test or validation one excused losing another)
    assert skipped.report["undecodable_left_out"] == [trained[1]]
    assert skipped.num_train_examples == drawn.num_train_examples - 1
    assert sorted(skipped.validation_files) == sorted(listed[1:])


def retinal_oct_files(tree, split):
    """Returns the scans of `split` in the OCT2017 `tree`, sorted."""
    import glob
    return sorted(glob.glob(os.path.join(tree, split, "*", "*.jpeg")))
