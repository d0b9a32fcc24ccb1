"""Image files checked from their headers: a pattern's scan, and odd JPEGs named before decoding."""
import os
import shutil

import tensorflow as tf
import pytest

from acquisition import image_checks
from acquisition.errors import InputDataError
from tests.conftest import OCT_CLASSES, make_oct_tree, odd_jpegs
from tests.input_fns.test_image_folder import pattern, tree_with_bad_files  # noqa: F401,F811 (a fixture)


def test_scan_labels_each_scan_by_its_folder(oct_sample):
    scan = image_checks.scan_folder(os.path.join(oct_sample, "*", "*.jpeg"), OCT_CLASSES)
    assert scan.class_counts() == {"CNV": 37, "DME": 29, "DRUSEN": 31, "NORMAL": 32}
    assert scan.bad_files == []
    assert all(os.path.basename(f).startswith(OCT_CLASSES[l] + "-") for f, l in zip(scan.files, scan.labels))


def test_bad_files_are_found_and_dot_files_ignored(tree_with_bad_files):
    scan = image_checks.scan_folder(pattern(tree_with_bad_files, "test"), OCT_CLASSES)
    assert sorted(os.path.basename(f) for f in scan.bad_files) == ["png-in-disguise.jpeg", "truncated.jpeg"]
    assert len(scan.files) == 26  # 24 good + 2 bad; .DS_Store never matches *.jpeg


def test_unknown_and_empty_class_folders_and_empty_patterns_are_errors(oct_sample, tmp_path):
    root = make_oct_tree(oct_sample, str(tmp_path / "OCT2017"))
    os.makedirs(os.path.join(root, "test", "GLAUCOMA"))
    shutil.copy(tf.io.gfile.glob(pattern(root, "test"))[0], os.path.join(root, "test", "GLAUCOMA", "x.jpeg"))
    with pytest.raises(InputDataError, match=r"unknown class folder\(s\) GLAUCOMA .* the classes are CNV, DME"):
        image_checks.scan_folder(pattern(root, "test"), OCT_CLASSES)
    shutil.rmtree(os.path.join(root, "test", "GLAUCOMA"))
    for f in os.listdir(os.path.join(root, "test", "DRUSEN")):
        os.remove(os.path.join(root, "test", "DRUSEN", f))
    with pytest.raises(InputDataError, match="no readable images of class DRUSEN"):
        image_checks.scan_folder(pattern(root, "test"), OCT_CLASSES)
    with pytest.raises(InputDataError, match="no files match the pattern"):
        image_checks.scan_folder(pattern(root, "val"), OCT_CLASSES)


def test_a_file_whose_name_is_not_utf8_is_named_in_one_line_not_a_traceback(oct_sample, tmp_path):
    # TensorFlow's glob decodes each name as UTF-8 and raised UnicodeDecodeError
    root = str(tmp_path / "train")
    shutil.copytree(oct_sample, root)
    first = sorted(os.listdir(os.path.join(root, "CNV")))[0]
    os.rename(os.fsencode(os.path.join(root, "CNV", first)), os.fsencode(os.path.join(root, "CNV")) + b"/caf\xe9.jpeg")
    with pytest.raises(InputDataError, match=r"CNV/caf\\udce9.jpeg' has a name that is not UTF-8.*rename it") as raised:
        image_checks.scan_folder(os.path.join(root, "*", "*.jpeg"), OCT_CLASSES)
    assert len(str(raised.value).splitlines()) == 1


def test_odd_jpegs_are_found_by_their_headers_before_tensorflow_fails_on_them(oct_sample, tmp_path):
    scan_path = os.path.join(oct_sample, "DME", sorted(os.listdir(os.path.join(oct_sample, "DME")))[0])
    assert image_checks.jpeg_problem(scan_path) is None
    for kind, (data, message) in odd_jpegs(open(scan_path, "rb").read()).items():
        path = tmp_path / f"{kind}.jpeg"
        path.write_bytes(data)
        assert image_checks.jpeg_problem(str(path)).startswith(message), kind
        with pytest.raises(tf.errors.InvalidArgumentError):  # what the check spares a training run
            tf.io.decode_jpeg(data, channels=1)
    assert image_checks.jpeg_problem(str(tmp_path / "absent.jpeg")) == "cannot be read (No such file or directory)"
    (tmp_path / "folder.jpeg").mkdir()  # unreadable as a file, as a chmod-000 file is for anyone but root
    assert image_checks.jpeg_problem(str(tmp_path / "folder.jpeg")) == "cannot be read (Is a directory)"


def test_rgb_and_progressive_jpegs_are_fine(oct_sample, tmp_path):
    from PIL import Image
    scan = Image.open(os.path.join(oct_sample, "NORMAL", sorted(os.listdir(os.path.join(oct_sample, "NORMAL")))[0]))
    scan.convert("RGB").save(tmp_path / "rgb.jpeg")
    scan.save(tmp_path / "progressive.jpeg", progressive=True)
    for name in ("rgb.jpeg", "progressive.jpeg"):
        assert image_checks.jpeg_problem(str(tmp_path / name)) is None
        assert tf.io.decode_jpeg(tf.io.read_file(str(tmp_path / name)), channels=1).shape[-1] == 1


def test_a_bad_file_whose_problem_names_its_fix_is_not_given_a_second():
    from acquisition.errors import InputDataError
    from acquisition.image_checks import FolderScan, check_bad_files
    cmyk = ("is a CMYK JPEG, which TensorFlow cannot decode to grayscale; convert it to grayscale or RGB")
    scan = FolderScan(["/d/a/1.jpg", "/d/b/2.png"], [0, 1], {"/d/a/1.jpg": cmyk, "/d/b/2.png": "is empty"}, ("a", "b"))
    with pytest.raises(InputDataError) as raised:
        check_bad_files([scan], "fail")
    assert str(raised.value) == (f"/d/a/1.jpg {cmyk} (and 1 more bad files), or pass --on-bad-image=skip to leave "
                                 "such files out")
    scan.problems.pop("/d/a/1.jpg")
    with pytest.raises(InputDataError, match=r"^/d/b/2.png is empty; remove or convert it, or pass --on-bad-image"):
        check_bad_files([scan], "fail")
