"""The Fashion job's recipe for the shipped sample: chosen with no recipe flag, off with any."""
import pytest

from pipeline.flags import build_parser
from pipeline.tasks import fashion_job
from pipeline.tasks.fashion import TASK
from pipeline.tasks.fashion_dataset import RECIPE_FLAGS, SAMPLE_RECIPE

FLAG_VALUES = {"batch_size": "512", "epochs": "5", "max_steps": "8", "learning_rate": "0.001",
               "lr_scaling": "linear"}  # each the full dataset's default: setting it at all is what counts


@pytest.fixture
def offline_default_dir(tmp_path, monkeypatch):
    """A default --data-dir with no dataset, whose download fails at once: the job falls back to the sample."""
    data_dir = str(tmp_path / "fashion-mnist")
    monkeypatch.setattr(fashion_job, "DEFAULT_DATA_DIR", data_dir)
    return ["--data-dir", data_dir, "--download-url", f"file://{tmp_path}/nowhere"]


def test_the_shipped_sample_with_no_recipe_flag_trains_with_the_samples_recipe(offline_default_dir):
    args = build_parser(TASK).parse_args(offline_default_dir + ["--seed", "3"])
    data = fashion_job.prepare_data(args, args.batch_size)
    assert data.num_train_examples == 718 and data.recipe.startswith("the shipped sample's: batch 32")
    assert data.recipe_values == SAMPLE_RECIPE and args.batch_size == 512  # as values: the flags stay as parsed
    assert data.report == {"recipe": "shipped sample"}
    images, _ = next(iter(data.train_input_fn()))
    assert images["image"].shape[0] == 32


@pytest.mark.parametrize("flag", RECIPE_FLAGS)
def test_any_recipe_flag_keeps_the_users_recipe_whole(offline_default_dir, flag):
    given = ["--" + flag.replace("_", "-"), FLAG_VALUES[flag]]
    args = build_parser(TASK).parse_args(offline_default_dir + given)
    data = fashion_job.prepare_data(args, args.batch_size)
    assert args.batch_size == 512 and args.lr_scaling == "linear" and args.learning_rate == 0.001
    assert data.recipe_values == {}
    assert data.recipe.startswith(f"the flags' (--{flag.replace('_', '-')} given)") and data.report == {"recipe": "flags"}


def test_the_full_dataset_keeps_the_flags_without_a_recipe_line(fashion_data_dir):
    args = build_parser(TASK).parse_args(["--data-dir", fashion_data_dir])
    data = fashion_job.prepare_data(args, args.batch_size)
    assert data.recipe is None and data.recipe_values == {} and args.batch_size == 512 and data.report == {}


def test_a_cache_that_cannot_be_written_into_the_data_dir_names_cache_dir():
    import errno
    from pipeline.errors import UsageError
    from pipeline.tasks.fashion_job import _cache_written_in

    def denied():
        raise PermissionError(errno.EACCES, "Permission denied", "/data/fs/tfrecords")
    with pytest.raises(UsageError, match=r"^the TFRecord cache cannot be written into the data dir "
                                         r"\(/data/fs/tfrecords: Permission denied\); pass --cache-dir with a folder"):
        with _cache_written_in("/data/fs", None):
            denied()
    with pytest.raises(PermissionError):  # --cache-dir's own folder: the usual line names that flag
        with _cache_written_in("/data/fs", "/cache"):
            denied()
    with pytest.raises(OSError, match="No space"):  # a full disk is not a matter of --cache-dir
        with _cache_written_in("/data/fs", None):
            raise OSError(errno.ENOSPC, "No space left on device", "/data/fs/tfrecords")
