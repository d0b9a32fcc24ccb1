"""Shared fixtures. The CPU is split into 2 logical devices before TensorFlow
starts, so the same process can train on 1 replica and mirror over 2."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import pipeline  # noqa: E402,F401  (quiets TensorFlow's C++ log before it is imported)
import pytest  # noqa: E402

from pipeline.distribution import split_cpu  # noqa: E402

split_cpu(2)

SHARED_DATA = os.path.join(os.path.dirname(ROOT), "shared", "data")
FASHION_SAMPLE = os.path.join(SHARED_DATA, "fashion-mnist-sample")
OCT_SAMPLE = os.path.join(SHARED_DATA, "oct-sample")
OCT_CLASSES = ("CNV", "DME", "DRUSEN", "NORMAL")


def assert_clean_failure(result, *fragments):
    """Asserts that a finished command failed as a user should see it: a non-zero exit,
    no Python traceback, and a last stderr line holding every fragment; returns that line."""
    assert result.returncode != 0, result.stdout[-2000:]
    assert "Traceback" not in result.stderr + result.stdout, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    for fragment in fragments:
        assert fragment in last, last
    return last


def pytest_configure(config):
    # TF 2.15 and Keras warn about their own TF 1 code paths the Estimator uses.
    for module in ("keras", "tensorflow", "tensorflow_estimator"):
        config.addinivalue_line("filterwarnings", rf"ignore::UserWarning:{module}\..*")
        config.addinivalue_line("filterwarnings", rf"ignore::DeprecationWarning:{module}\..*")
    config.addinivalue_line("filterwarnings", "ignore:non-integer arguments to randrange:DeprecationWarning")


@pytest.fixture(scope="session")
def fashion_sample():
    """The real 1,000-image Fashion-MNIST sample (t10k files) beside the repo."""
    if not os.path.isdir(FASHION_SAMPLE):
        pytest.fail(f"the real data sample is missing: {FASHION_SAMPLE} (CI has ../shared beside the repo)")
    return FASHION_SAMPLE


@pytest.fixture(scope="session")
def fashion_data_dir(fashion_sample, tmp_path_factory):
    """A Fashion-MNIST data dir made from the real sample: 800 train / 200 test images."""
    from pipeline.tasks.fashion import split_sample
    out = str(tmp_path_factory.mktemp("fashion-data"))
    split_sample(fashion_sample, out, num_train=800)
    return out


@pytest.fixture(scope="session")
def oct_sample():
    """The real 129-scan OCT sample (class folders of JPEGs) beside the repo."""
    if not os.path.isdir(OCT_SAMPLE):
        pytest.fail(f"the real data sample is missing: {OCT_SAMPLE} (CI has ../shared beside the repo)")
    return OCT_SAMPLE


def make_oct_tree(sample, root, test_per_class=6):
    """Copies the real sample into an OCT2017-style tree under `root`: the last
    `test_per_class` scans of each class go to test/, the rest to train/."""
    import shutil
    for name in OCT_CLASSES:
        files = sorted(os.listdir(os.path.join(sample, name)))
        for split, chosen in (("train", files[:-test_per_class]), ("test", files[-test_per_class:])):
            os.makedirs(os.path.join(root, split, name), exist_ok=True)
            for f in chosen:
                shutil.copy(os.path.join(sample, name, f), os.path.join(root, split, name, f))
    return root


@pytest.fixture(scope="session")
def oct_tree(oct_sample, tmp_path_factory):
    """A read-only-by-convention OCT2017 tree made from the real sample: 105 train / 24 test scans."""
    return make_oct_tree(oct_sample, str(tmp_path_factory.mktemp("oct") / "OCT2017"))
