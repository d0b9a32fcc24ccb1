"""Shared fixtures. The CPU is split into 2 logical devices before TensorFlow
starts, so the same process can train on 1 replica and mirror over 2."""
import contextlib
import os
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # as the command lines do, before TensorFlow starts
from pipeline.cli import TENSORFLOW_DEFAULTS  # noqa: E402 - imports no TensorFlow
for _name, _value in TENSORFLOW_DEFAULTS.items():  # the kernels the command lines run, in-process too
    os.environ.setdefault(_name, _value)
# One peak cache (pipeline.peak) for every test and the command lines they start, even with another
# HOME: the machine's peak is probed once, not in each run.
os.environ.setdefault("PIPELINE_PEAK_CACHE", os.path.join(
    __import__("tempfile").gettempdir(), f"pipeline-tests-peak-{os.getuid()}.json"))

import pytest  # noqa: E402

from pipeline.distribution import split_cpu  # noqa: E402
from tests.scheduling import CPU_LOG_VARIABLE, cpu_seconds, longest_first, read_seconds, record_cpu  # noqa: E402

split_cpu(2)

# The real data samples shipped in the repo: the suite needs nothing beside a fresh clone.
FASHION_SAMPLE = os.path.join(ROOT, "acquisition", "data", "fashion-mnist-sample")
OCT_SAMPLE = os.path.join(ROOT, "acquisition", "data", "oct-sample")
OCT_CLASSES = ("CNV", "DME", "DRUSEN", "NORMAL")
# OCT2017's real training set, class-sorted folders of these sizes, and its test set.
OCT2017_TRAIN_COUNTS = {"CNV": 37205, "DME": 11348, "DRUSEN": 8616, "NORMAL": 26315}
OCT2017_TEST_PER_CLASS = 242


def assert_clean_failure(result, *fragments):
    """Asserts that a finished command failed as a user should see it: a non-zero exit,
    no Python traceback, and a last stderr line holding every fragment; returns that line."""
    assert result.returncode != 0, result.stdout[-2000:]
    assert "Traceback" not in result.stderr + result.stdout, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    for fragment in fragments:
        assert fragment in last, last
    return last


@contextlib.contextmanager
def small_file_system(folder, size):
    """Mounts a tmpfs of `size` bytes at `folder` (made here) while entered, a disk that fills up; skips the test
    where mounting needs root it does not have (.ci/run has it)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small file system needs root (as .ci/run has)")
    os.makedirs(folder)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], check=True)
    try:
        yield folder
    finally:
        subprocess.run(["umount", "--lazy", str(folder)], check=True)


def write_cpuinfo(tmp_path, flags):
    """Writes a one-CPU /proc/cpuinfo with `flags` (beside fpu sse2 avx2) under `tmp_path`; returns its path."""
    path = tmp_path / "cpuinfo"
    path.write_text(f"processor\t: 0\nmodel name\t: Test CPU\nflags\t\t: fpu sse2 avx2 {flags}\n\n")
    return str(path)


def default_sighup():
    """A Popen preexec_fn: the child starts with SIGHUP's default disposition, not this process's. Children inherit
    an ignored signal: under `nohup` (or a CI agent that ignores SIGHUP) the jobs and launchers the tests hang up
    kept it ignored, as a run started under nohup must (pipeline.signals), and the tests waited for them in vain."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def alive(pid):
    """Returns whether process `pid` runs (a zombie, ended but not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def assert_ends(pid, seconds, message):
    """Asserts that process `pid` stops running within `seconds` (polling `alive`)."""
    deadline = time.monotonic() + seconds
    while alive(pid):
        assert time.monotonic() < deadline, message
        time.sleep(0.05)


def pytest_configure(config):
    # TF 2.15 and Keras warn about their own TF 1 code paths the Estimator uses.
    for module in ("keras", "tensorflow", "tensorflow_estimator"):
        config.addinivalue_line("filterwarnings", rf"ignore::UserWarning:{module}\..*")
        config.addinivalue_line("filterwarnings", rf"ignore::DeprecationWarning:{module}\..*")
    config.addinivalue_line("filterwarnings", "ignore:non-integer arguments to randrange:DeprecationWarning")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    log = os.environ.get(CPU_LOG_VARIABLE)
    before = cpu_seconds() if log else None
    yield
    if log:
        record_cpu(log, item.nodeid, cpu_seconds() - before)


def pytest_collection_modifyitems(config, items):
    # The longest files start first (tests/scheduling.py); pytest.ini's --no-loadscope-reorder keeps this order.
    items[:] = longest_first(items, read_seconds())


@pytest.fixture(scope="session")
def fashion_sample():
    """The real 1,000-image Fashion-MNIST sample (t10k files) shipped in the repo."""
    return FASHION_SAMPLE


@pytest.fixture(scope="session")
def fashion_data_dir(fashion_sample, tmp_path_factory):
    """A Fashion-MNIST data dir made from the real sample: 800 train / 200 test images."""
    from acquisition.fashion_mnist import split_sample
    out = str(tmp_path_factory.mktemp("fashion-data"))
    split_sample(fashion_sample, out, num_train=800)
    return out


@pytest.fixture(scope="session")
def oct_sample():
    """The real 129-scan OCT sample (class folders of JPEGs) shipped in the repo."""
    return OCT_SAMPLE


def make_oct_tree(sample, root, test_per_class=6):
    """Copies the real sample into an OCT2017-style tree under `root` (see
    retinal_oct.make_sample_tree); returns `root`."""
    from acquisition import retinal_oct
    retinal_oct.make_sample_tree(root, sample, test_per_class)
    return root


@pytest.fixture(scope="session")
def oct_tree(oct_sample, tmp_path_factory):
    """A read-only-by-convention OCT2017 tree made from the real sample: 105 train / 24 test scans."""
    return make_oct_tree(oct_sample, str(tmp_path_factory.mktemp("oct") / "OCT2017"))


def _link(source, target):
    try:
        os.link(source, target)
    except OSError:  # another file system: a symbolic link reads the same
        os.symlink(source, target)


def make_full_size_oct_tree(sample, root):
    """Lays out an OCT2017 tree of the real size and class mix under `root` (83,484 training
    scans in class folders, 242 test scans per class) as hard links to the real sample's
    scans, each used over and over under its own name; returns `root`."""
    for split, counts in (("train", OCT2017_TRAIN_COUNTS),
                          ("test", dict.fromkeys(OCT_CLASSES, OCT2017_TEST_PER_CLASS))):
        for name, count in counts.items():
            scans = sorted(os.listdir(os.path.join(sample, name)))
            folder = os.path.join(root, split, name)
            os.makedirs(folder)
            for i in range(count):
                scan = scans[i % len(scans)]
                _link(os.path.join(sample, name, scan), os.path.join(folder, f"{i:05d}-{scan}"))
    return root


@pytest.fixture(scope="session")
def full_oct_tree(oct_sample, tmp_path_factory):
    """An OCT2017 tree of the real size and class mix, made of hard links to the real sample (about 2 s)."""
    return make_full_size_oct_tree(oct_sample, str(tmp_path_factory.mktemp("oct-full") / "OCT2017"))


@pytest.fixture(scope="session")
def full_oct_records(oct_sample, tmp_path_factory):
    """prepare_oct's shards at 32 pixels of a full-size tree (as full_oct_tree) of the real scans
    shrunk to 40 pixels: what is tested of these shards is their order and class mix, and decoding
    the real 500-pixel scans 84,000 times took 45 s (about 6 s at 40)."""
    from PIL import Image
    from pipeline.tasks import oct_job
    small = tmp_path_factory.mktemp("oct-sample-40px")
    for name in OCT_CLASSES:
        os.makedirs(small / name)
        for scan in os.listdir(os.path.join(oct_sample, name)):
            Image.open(os.path.join(oct_sample, name, scan)).convert("L").resize((40, 40)).save(small / name / scan)
    tree = make_full_size_oct_tree(str(small), str(tmp_path_factory.mktemp("oct-full-40px") / "OCT2017"))
    out = str(tmp_path_factory.mktemp("oct-full-records"))
    oct_job.prepare_records(os.path.dirname(tree), out, 32)
    return out


@pytest.fixture(scope="session")
def full_fashion_data_dir(fashion_sample, tmp_path_factory):
    """A Fashion-MNIST data dir of the real size (60,000 / 10,000) made by repeating the real
    sample, sorted by class: the worst order a converted dataset can come in."""
    from acquisition import fashion_mnist
    import numpy as np
    images, labels = fashion_mnist.load_split(fashion_sample, "test")
    out = str(tmp_path_factory.mktemp("fashion-full"))
    for split, repeats in (("train", 60), ("test", 10)):
        tiled_images, tiled_labels = np.tile(images, (repeats, 1, 1)), np.tile(labels, repeats)
        order = np.argsort(tiled_labels, kind="stable")
        fashion_mnist.write_split(out, split, tiled_images[order], tiled_labels[order])
    return out


def odd_jpegs(data):
    """Returns {kind: (file bytes, what the check says)} for JPEG files TensorFlow cannot
    decode to grayscale, made from the real scan `data`: as a scanner or a converter writes
    them (CMYK), or with the frame header of a 12-bit, lossless or size-less JPEG."""
    import io
    from PIL import Image
    sof = data.index(b"\xff\xc0")  # baseline frame header: marker, length, precision, height, width
    cmyk = io.BytesIO()
    Image.open(io.BytesIO(data)).convert("CMYK").save(cmyk, "JPEG")
    return {
        "cmyk": (cmyk.getvalue(), "is a CMYK JPEG, which TensorFlow cannot decode to grayscale"),
        "12-bit": (data[:sof + 4] + b"\x0c" + data[sof + 5:], "is a 12-bit JPEG"),
        "lossless": (data[:sof + 1] + b"\xc3" + data[sof + 2:], "is a lossless or hierarchical JPEG"),
        "no-size": (data[:sof + 5] + b"\x00\x00" + data[sof + 7:], "has no image size in its JPEG header"),
        "empty": (b"", "is empty"),
        "truncated": (data[:len(data) // 2], "is truncated (no JPEG end marker)"),
    }
