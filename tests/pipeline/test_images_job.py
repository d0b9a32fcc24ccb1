"""The images job's split in the model dir: written once, reused on resume, and guarded."""
import os

import pytest

from acquisition.errors import InputDataError
from pipeline.errors import UsageError
from pipeline.flags import build_parser
from pipeline.tasks import images_job
from pipeline.tasks.images import TASK
from tests.images_data import make_shapes_folder


def args_for(data, model_dir, *extra):
    return build_parser(TASK).parse_args(["--data-dir", data, "--model-dir", model_dir, "--image-size", "32", *extra])


def test_the_split_is_listed_in_the_model_dir_and_reused(tmp_path, monkeypatch):
    data, model_dir = make_shapes_folder(str(tmp_path / "data"), per_class=10), str(tmp_path / "model")
    first = images_job.load_dataset(args_for(data, model_dir))
    assert not os.path.exists(os.path.join(model_dir, "split"))  # written once training starts: see save_split
    first.save_split()
    listed = (tmp_path / "model" / "split" / "test.txt").read_text().splitlines()
    assert [os.path.join(data, f) for f in listed] == first.splits["test"][0] and len(listed) == 6
    images_job._DATASETS.clear()
    (tmp_path / "data" / "circle" / "added.png").write_bytes((tmp_path / "data" / "circle" / "001.png").read_bytes())
    again = images_job.load_dataset(args_for(data, model_dir))
    assert again.splits == first.splits  # the new image is left out, not drawn into either side
    images_job._DATASETS.clear()
    monkeypatch.chdir(tmp_path)  # resumed with the same folder named relative to the working dir
    relative = images_job.load_dataset(args_for("data", model_dir))
    assert relative.splits == {side: ([os.path.join("data", os.path.relpath(f, data)) for f in files], labels)
                               for side, (files, labels) in first.splits.items()}

    with pytest.raises(UsageError, match=r"was split with --test-fraction 0.2, not 0.5; pass --test-fraction 0.2"):
        images_job.load_dataset(args_for(data, model_dir, "--test-fraction", "0.5"))
    with pytest.raises(UsageError, match="was trained on .*data, not .*other; pass that --data-dir"):
        images_job.load_dataset(args_for(make_shapes_folder(str(tmp_path / "other"), per_class=3), model_dir))
    os.remove(first.splits["test"][0][0])
    images_job._DATASETS.clear()
    with pytest.raises(InputDataError, match=r"listed in .*test.txt, is no longer an image of the data dir"):
        images_job.load_dataset(args_for(data, model_dir))


def test_balanced_class_weights():
    assert images_job.balanced_class_weights([30, 10]) == pytest.approx([40 / 60, 40 / 20])
