import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from inspection import input_report
from inspection.sheet import is_contact_sheet


def labelled_batches(labels_per_batch, num_classes=3):
    def input_fn(input_context=None):
        batches = [({"image": np.zeros((len(b), 4, 4, 1), np.uint8)},
                    np.eye(num_classes, dtype=np.float32)[b]) for b in labels_per_batch]
        return tf.data.Dataset.from_generator(lambda: iter(batches), output_signature=(
            {"image": tf.TensorSpec((None, 4, 4, 1), tf.uint8)}, tf.TensorSpec((None, num_classes), tf.float32)))
    return input_fn


def test_class_counts_per_batch_and_the_mix_against_the_dataset():
    input_fn = labelled_batches([[0, 0, 0, 0], [0, 1, 2, 2], [1, 1, 2, 0]])
    report = input_report.inspect_batches(input_fn, num_batches=3, num_classes=3)
    assert report["class_counts_per_batch"] == [[4, 0, 0], [1, 1, 2], [1, 2, 1]]
    assert report["first_labels"].tolist() == [0, 0, 0, 0] and report["first_images"].shape == (4, 4, 4, 1)
    assert report["images_per_sec"] > 0
    mix = input_report.class_mix(report["class_counts_per_batch"], dataset_counts=[50, 25, 25])
    assert mix["class_counts"] == [6, 3, 3]
    assert mix["class_share"] == pytest.approx([0.5, 0.25, 0.25])
    assert mix["dataset_class_share"] == pytest.approx([0.5, 0.25, 0.25])
    assert mix["single_class_batches"] == 1
    text = input_report.format_report({**report, **mix}, ["a", "b", "c"], "header")
    assert "    1      4      0      0" in text and "batches of a single class: 1" in text
    assert "a       50.0%  (dataset  50.0%)" in text


def test_only_the_batches_asked_for_are_read():
    report = input_report.inspect_batches(labelled_batches([[0], [1], [2]]), num_batches=2, num_classes=3)
    assert len(report["class_counts_per_batch"]) == 2


def test_the_contact_sheet_is_a_png_of_the_batch(tmp_path):
    images = np.random.default_rng(0).integers(0, 255, (10, 16, 16, 1), dtype=np.uint8)
    path = input_report.write_contact_sheet(images, np.arange(10) % 3, ["a", "b", "c"], str(tmp_path / "s.png"))
    assert open(path, "rb").read(8) == b"\x89PNG\r\n\x1a\n"


def test_a_worker_reads_through_its_input_context():
    assert input_report.input_context(1, 0) is None
    context = input_report.input_context(3, 2)
    assert (context.num_input_pipelines, context.input_pipeline_id) == (3, 2)


@pytest.mark.parametrize("sheet, fragment", [("sheet", "expected a file name ending in .png, got"),
                                             ("sheet.txt", "expected a file name ending in .png, got"),
                                             ("folder.png", "is a folder; give a file name ending in .png"),
                                             ("learning_curves.png", "is there and is not a contact sheet"),
                                             ("notes.png", "is there and is not a contact sheet")])
def test_a_sheet_path_it_would_not_write_as_given_is_refused(tmp_path, capsys, sheet, fragment):
    """It wrote sheet.png when told 'sheet' (and said 'sheet'), a .txt path ended in a traceback, and a model
    dir's report figure (or any file) given as --sheet was written over."""
    from inspection.cli import main
    (tmp_path / "folder.png").mkdir()
    Image.fromarray(np.zeros((4, 4), np.uint8)).save(tmp_path / "learning_curves.png")
    (tmp_path / "notes.png").write_text("mine\n")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    with pytest.raises(SystemExit) as exit_info:
        main(["--task", "fashion", "--synthetic", "--sheet", str(tmp_path / sheet)])
    assert exit_info.value.code == 2 and fragment in capsys.readouterr().err.strip().splitlines()[-1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder.png", "learning_curves.png", "notes.png"]
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before


def test_a_contact_sheet_written_before_may_be_written_again(tmp_path):
    from inspection.cli import png_path
    images = np.zeros((2, 8, 8, 1), np.uint8)
    path = input_report.write_contact_sheet(images, np.arange(2), ["a", "b"], str(tmp_path / "s.png"))
    assert is_contact_sheet(path) and png_path(path) == path
    assert png_path(str(tmp_path / "new.png")) == str(tmp_path / "new.png")

