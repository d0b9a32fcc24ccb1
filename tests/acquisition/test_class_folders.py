"""Folders of class folders: their layouts, the stratified and grouped split, and a 100,000-image
folder scanned and split at real size."""
import collections
import logging
import os
import re
import signal
import threading
import time

import numpy as np
import pytest

from acquisition import class_folders
from acquisition.errors import InputDataError
from acquisition.image_checks import check_bad_files
from pipeline.signals import Interrupted, StopSignals
from tests.images_data import draw_shape, encode, make_shapes_folder


def write_images(folder, count, fmt=("RGB", "PNG", ".png"), prefix=""):
    os.makedirs(folder, exist_ok=True)
    data = encode(draw_shape("square", 24, np.random.default_rng(0)), fmt[0], fmt[1])
    for i in range(count):
        with open(os.path.join(folder, f"{prefix}{i:04d}{fmt[2]}"), "wb") as f:
            f.write(data)


def test_class_folders_with_spaces_and_non_ascii_names_and_junk(tmp_path):
    root = make_shapes_folder(str(tmp_path / "shapes"), per_class=8, classes=("cœur", "plus sign", "Ω"))
    folders = class_folders.scan_class_folders(root)
    assert folders.class_names == ("cœur", "plus sign", "Ω") and not folders.presplit
    assert folders.scans["all"].class_counts() == {"cœur": 8, "plus sign": 8, "Ω": 8}
    assert folders.ignored_files == 3 and not folders.gray and not folders.scans["all"].problems


def test_folders_systems_leave_beside_the_images_are_neither_classes_nor_images(tmp_path):
    """A macOS zip's __MACOSX/ was taken for a class (and the run refused it as one without images); a Synology
    share's @eaDir/ holds a JPEG thumbnail of each image, which a class folder's walk trained as its images."""
    write_images(str(tmp_path / "a"), 3)
    write_images(str(tmp_path / "b"), 2)
    write_images(str(tmp_path / "__MACOSX" / "a"), 3, prefix="._")
    write_images(str(tmp_path / "$Recycle.Bin" / "S-1-5-21"), 2)  # Windows' own spelling on a fixed drive
    for name in ("0000.png", "0001.png"):
        write_images(str(tmp_path / "b" / "@eaDir" / name), 2, fmt=("RGB", "JPEG", ".jpg"), prefix="SYNOPHOTO_")
    folders = class_folders.scan_class_folders(str(tmp_path))
    assert folders.class_names == ("a", "b") and folders.scans["all"].class_counts() == {"a": 3, "b": 2}
    from serving.predict import image_paths
    assert [os.path.basename(p) for p in image_paths([str(tmp_path / "b")])] == ["0000.png", "0001.png"]


def test_a_named_pipe_called_like_an_image_is_a_bad_file_not_a_scan_that_waits_for_ever(tmp_path):
    """Opening a FIFO waits for a writer: the scan hung without a line, and the first SIGTERM could not end it."""
    for name in ("a", "b"):
        write_images(str(tmp_path / name), 2)
    os.mkfifo(tmp_path / "a" / "pipe.jpg")
    found = {}
    scanning = threading.Thread(target=lambda: found.update(scan=class_folders.scan_class_folders(str(tmp_path))),
                                daemon=True)
    scanning.start()
    scanning.join(60)
    assert not scanning.is_alive(), "the scan waits on the pipe"
    scan = found["scan"].scans["all"]
    assert scan.problems == {str(tmp_path / "a" / "pipe.jpg"): "cannot be read (it is a pipe, a device or a socket, "
                                                               "not a file)"}


def test_a_stop_signal_mid_scan_ends_it_without_checking_the_files_not_begun(tmp_path, monkeypatch):
    """The scan queues every file at once; a stop signal (or a failure) must drop the ones not begun, not check
    all 83,484 of OCT2017 on the way out (Executor.map's iterator cancels them when it is closed)."""
    for name in ("a", "b"):
        write_images(str(tmp_path / name), 2)
    files = 400
    begun = []
    real_check = class_folders.check_image

    def slow_check(path, channels=None):  # a slow disk: each file takes 20 ms
        begun.append(path)
        time.sleep(0.02)
        return real_check(str(tmp_path / "a" / "0000.png"), channels)
    monkeypatch.setattr(class_folders, "walk_images", lambda folder: ([f"{folder}/{i:04}.png" for i in range(files)], []))
    monkeypatch.setattr(class_folders, "check_image", slow_check)

    # 2 x 400 files x 20 ms over 4 threads take 4 s; the stop comes after 0.3 s, as a run's before training
    sender = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM))
    with pytest.raises(Interrupted), StopSignals():
        sender.start()
        class_folders.scan_class_folders(str(tmp_path), workers=4)
    checked_by_the_end = len(begun)
    sender.join()
    assert 0 < checked_by_the_end < files / 2, checked_by_the_end


def test_a_stop_signal_while_the_scan_queues_its_files_drops_the_ones_queued(tmp_path, monkeypatch):
    """Executor.map cancels what it queued only from its iterator: a stop that came while it still queued the files
    (the test above's timer, in a copy of it on a loaded machine: 2 runs in 60) left every file queued to be
    checked on the way out."""
    from concurrent.futures import ThreadPoolExecutor
    for name in ("a", "b"):
        write_images(str(tmp_path / name), 2)
    files, begun = 400, []
    real_check = class_folders.check_image

    def slow_check(path, channels=None):
        begun.append(path)
        time.sleep(0.02)
        return real_check(str(tmp_path / "a" / "0000.png"), channels)

    class StoppedWhileQueueing(ThreadPoolExecutor):
        queued = 0

        def submit(self, *args, **kwargs):
            future = super().submit(*args, **kwargs)
            type(self).queued += 1
            if type(self).queued == files:  # half the files queued
                os.kill(os.getpid(), signal.SIGTERM)
            return future
    monkeypatch.setattr(class_folders, "walk_images", lambda folder: ([f"{folder}/{i:04}.png" for i in range(files)], []))
    monkeypatch.setattr(class_folders, "check_image", slow_check)
    monkeypatch.setattr(class_folders, "ThreadPoolExecutor", StoppedWhileQueueing)
    with pytest.raises(Interrupted), StopSignals():
        class_folders.scan_class_folders(str(tmp_path), workers=4)
    assert len(begun) < files / 2, len(begun)


def test_train_and_test_folders_are_used_as_they_are(tmp_path):
    for split, count in (("Train", 6), ("test", 2)):
        for name in ("a", "b"):
            write_images(str(tmp_path / split / name), count, ("L", "BMP", ".BMP"))
    folders = class_folders.scan_class_folders(str(tmp_path))
    assert folders.presplit and folders.class_names == ("a", "b") and folders.gray
    assert folders.scans["train"].num_good == 12 and folders.scans["test"].num_good == 4


@pytest.mark.parametrize("top, words", [
    (("train", "val"), "holds the split folders train, val, which would be read as classes; add {root}/test, or "
                       "pass --data-dir {root}/train (split into train and test here) with --validation-dir "
                       "{root}/val"),
    (("Train", "Valid"), "pass --data-dir {root}/Train"),
    (("test", "validation"), "add {root}/train with the training images' class folders"),
    (("train", "test", "extra"), "holds the split folders test, train beside extra, which would be read as "
                                 "classes; move extra out of it"),
])
def test_split_folders_that_are_no_train_and_test_layout_are_not_trained_as_classes(tmp_path, top, words):
    for split in top:
        for name in ("a", "b"):
            write_images(str(tmp_path / split / name), 2)
    with pytest.raises(InputDataError, match=re.escape(words.format(root=tmp_path))):
        class_folders.scan_class_folders(str(tmp_path))


@pytest.mark.parametrize("classes", [("bus", "car", "train"), ("valid", "invalid"), ("test", "control")])
def test_one_class_called_as_a_split_is_a_class(tmp_path, classes):
    for name in classes:
        write_images(str(tmp_path / name), 2)
    assert class_folders.scan_class_folders(str(tmp_path)).class_names == tuple(sorted(classes))


@pytest.mark.parametrize("split, words", [
    ("val", "move it out of {root} and pass it as --validation-dir"),
    ("test", "lay {root} out as train/<class>/ and test/<class>/, or move test out of it"),
])
def test_one_split_folder_of_the_classes_beside_them_is_refused_not_trained_as_a_class(tmp_path, split, words):
    """DIR/{a,b,val/a,val/b}: val/ was trained as a third class, of every class's images."""
    for name in ("a", "b", f"{split}/a", f"{split}/b"):
        write_images(str(tmp_path / name), 2)
    with pytest.raises(InputDataError, match=re.escape(f"{tmp_path / split} holds the class folder(s) a, b: it is a "
                                                       "split of the classes, not a class, and would be trained as "
                                                       "one; " + words.format(root=tmp_path))):
        class_folders.read_layout(str(tmp_path))


def test_train_and_test_beside_a_valid_folder_are_a_layout_that_names_it_unread(tmp_path):
    for split in ("train", "test", "valid"):
        for name in ("a", "b"):
            write_images(str(tmp_path / split / name), 2)
    folders = class_folders.scan_class_folders(str(tmp_path))
    assert folders.presplit and folders.unread_folders == (str(tmp_path / "valid"),)


def test_a_test_folder_without_a_class_of_train_is_named_as_such(tmp_path):
    """It said 'no readable images of class 'b' in .../test; add some or remove the folder' of a folder
    that is not there."""
    for split, names in (("train", ("a", "b")), ("test", ("a",))):
        for name in names:
            write_images(str(tmp_path / split / name), 3)
    with pytest.raises(InputDataError, match=r"test has no folder for class\(es\) 'b', which train has; add its "
                                             "test images in one, or take the class out of train"):
        class_folders.scan_class_folders(str(tmp_path))


def test_the_bad_files_of_train_and_test_folders_are_counted_together(tmp_path, caplog):
    for split, count in (("train", 6), ("test", 3)):
        for name in ("a", "b"):
            write_images(str(tmp_path / split / name), count)
    for bad in ("train/a/0000.png", "test/a/0001.png", "test/b/0002.png"):
        (tmp_path / bad).write_bytes(b"not an image")
    folders = class_folders.scan_class_folders(str(tmp_path))
    with pytest.raises(InputDataError, match=r"^\S+/test/a/0001\.png .* \(and 2 more bad files\); remove"):
        check_bad_files(folders.scans.values(), "fail")
    with caplog.at_level(logging.WARNING):
        check_bad_files(folders.scans.values(), "skip")
    assert folders.scans["train"].num_good == 11 and folders.scans["test"].num_good == 4
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert re.match(r"^3 bad image files left out \(--on-bad-image skip\), the first \S+/test/a/0001\.png .*; "
                    r"the run's results\.json lists each \(skipped_files\)$", warning), warning


@pytest.mark.parametrize("layout,message", [
    ({"only": 3}, r"holds 1 class folder\(s\); a classifier needs at least 2"),
    ({"a": 3, "empty": 0}, "no readable images of class 'empty'"),
])
def test_folders_a_classifier_cannot_learn_from_are_one_line(tmp_path, layout, message):
    for name, count in layout.items():
        write_images(str(tmp_path / name), count)
    with pytest.raises(InputDataError, match=message) as raised:
        class_folders.scan_class_folders(str(tmp_path))
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize("line_break", ["\n", "\r", "\u2028"])
def test_a_class_folder_whose_name_breaks_a_line_is_refused_in_one_line(tmp_path, line_break):
    # an export lists its class names one a line: 'a\nb' would come back as the classes 'a' and 'b'
    for name in (f"a{line_break}b", "c"):
        write_images(str(tmp_path / name), 3)
    with pytest.raises(InputDataError, match="has a line break in its name.*rename it") as raised:
        class_folders.scan_class_folders(str(tmp_path))
    assert len(str(raised.value).splitlines()) == 1 and repr(f"a{line_break}b")[1:-1] in str(raised.value)


def test_an_image_whose_name_breaks_a_line_is_a_bad_file_named_in_one_line(tmp_path):
    # a split file lists the files one a line: 'img\n3.png' would come back as 'img' and '3.png'
    for name in ("a", "b"):
        write_images(str(tmp_path / name), 3)
    os.rename(tmp_path / "a" / "0001.png", tmp_path / "a" / "img\n1.png")
    scan = class_folders.scan_class_folders(str(tmp_path)).scans["all"]
    assert scan.bad_files == [str(tmp_path / "a" / "img\n1.png")] and scan.num_good == 5
    with pytest.raises(InputDataError, match="has a line break in its name") as raised:
        check_bad_files([scan], "fail")
    assert len(str(raised.value).splitlines()) == 1
    check_bad_files([scan], "skip")  # left out, as other bad files are
    assert all("\n" not in f for f in scan.good()[0])


def test_an_image_whose_name_is_not_utf8_is_a_bad_file_and_a_class_folder_so_named_is_refused(tmp_path):
    # unzip leaves an old Windows zip's names in its code page: Python holds the byte 0xe9 as '\udce9'
    for name in ("a", "b"):
        write_images(str(tmp_path / name), 3)
    os.rename(os.fsencode(tmp_path / "a" / "0001.png"), os.fsencode(tmp_path / "a") + b"/caf\xe9.png")
    scan = class_folders.scan_class_folders(str(tmp_path)).scans["all"]
    assert scan.bad_files == [str(tmp_path / "a" / "caf\udce9.png")] and scan.num_good == 5
    with pytest.raises(InputDataError, match="caf.udce9.png' has a name that is not UTF-8.*convmv") as raised:
        check_bad_files([scan], "fail")
    assert len(str(raised.value).splitlines()) == 1
    check_bad_files([scan], "skip")
    assert all(f.encode("utf-8") for f in scan.good()[0])
    os.rename(os.fsencode(tmp_path / "b"), os.fsencode(tmp_path) + b"/b\xe9")
    with pytest.raises(InputDataError, match="class folder .*b.udce9' has a name that is not UTF-8"):
        class_folders.read_layout(str(tmp_path))
    os.rename(os.fsencode(tmp_path) + b"/b\xe9", os.fsencode(tmp_path / "b"))
    os.rename(os.fsencode(tmp_path), os.fsencode(tmp_path) + b"-d\xe9")  # the data dir's own name: said as such
    with pytest.raises(InputDataError, match=r"^the data dir '.*-d\\udce9' has a name that is not UTF-8"):
        class_folders.read_layout(str(tmp_path) + "-d\udce9")
    with pytest.raises(InputDataError, match=r"^--validation-dir '.*-d\\udce9' has a name that is not UTF-8"):
        class_folders.read_layout(str(tmp_path) + "-d\udce9", flag="--validation-dir")  # (not 'the data dir')


def test_a_class_folders_linked_subfolders_are_its_images_each_once_and_a_link_up_the_tree_ends(tmp_path):
    """A linked subfolder was left out of training without a word, while predict.py walked into it."""
    write_images(str(tmp_path / "data" / "a"), 3)
    write_images(str(tmp_path / "data" / "b"), 2)
    write_images(str(tmp_path / "store" / "more-b"), 4, prefix="more")
    os.symlink(tmp_path / "store" / "more-b", tmp_path / "data" / "b" / "more")
    os.symlink(tmp_path / "store" / "more-b", tmp_path / "data" / "b" / "same")  # the same folder again: once
    os.symlink(tmp_path / "data" / "b", tmp_path / "data" / "b" / "up")  # a loop
    os.symlink(tmp_path / "data", tmp_path / "data" / "b" / "parent")  # above: a's images would be b's
    os.symlink(tmp_path, tmp_path / "data" / "b" / "grandparent")
    scan = class_folders.scan_class_folders(str(tmp_path / "data")).scans["all"]
    assert scan.class_counts() == {"a": 3, "b": 6}
    assert [os.path.relpath(f, tmp_path / "data" / "b") for f in scan.files[3:]] == [
        "0000.png", "0001.png", "more/more0000.png", "more/more0001.png", "more/more0002.png", "more/more0003.png"]


def test_the_split_is_stratified_seeded_and_disjoint():
    files = [f"/d/{c}/{i}.png" for c, n in (("a", 100), ("b", 30)) for i in range(n)]
    labels = [0] * 100 + [1] * 30
    split = class_folders.split_files(files, labels, 0.2, seed=3)
    assert collections.Counter(l for _, l in split["test"]) == {0: 20, 1: 6}
    assert not {f for f, _ in split["train"]} & {f for f, _ in split["test"]}
    assert len(split["train"]) + len(split["test"]) == 130
    assert split == class_folders.split_files(files, labels, 0.2, seed=3)
    assert split != class_folders.split_files(files, labels, 0.2, seed=4)


def test_group_by_keeps_each_group_on_one_side():
    files = [f"/d/{c}/{c}-patient{p}-{i}.jpeg" for c in ("CNV", "NORMAL") for p in range(20) for i in range(3)]
    labels = [0 if "CNV" in f else 1 for f in files]
    split = class_folders.split_files(files, labels, 0.25, seed=0, group_by=r"-(patient\d+)-")
    sides = {side: {class_folders.group_of(f, r"-(patient\d+)-") + f.split("/")[2] for f, _ in split[side]}
             for side in ("train", "test")}
    assert sides["train"] and sides["test"] and not sides["train"] & sides["test"]
    assert 24 <= len(split["test"]) <= 36  # about a quarter of 120
    with pytest.raises(InputDataError, match=r"/d/x/odd\.jpeg does not match --group-by='-\(patient\\d\+\)-'; "):
        class_folders.split_files(files + ["/d/x/odd.jpeg"], labels + [0], 0.25, group_by=r"-(patient\d+)-")
    with pytest.raises(InputDataError, match=r"CNV-patient0-0\.jpeg matches --group-by='\(x\)\?patient', but its "
                                             "first group took no part in the match"):
        class_folders.split_files(files, labels, 0.25, group_by=r"(x)?patient")


def test_twins_train_with_their_groups_and_each_class_keeps_its_test_share():
    """An image's links and copies (`twins`) train with it, chains and groups joined: patient 1's copy of
    patient 2's scan, and patient 2's of patient 3's, put all three patients in training."""
    files = [f"/d/{c}/{c}-patient{p}-{i}.png" for c in ("a", "b") for p in range(10) for i in range(2)]
    labels = [0 if "/a/" in f else 1 for f in files]
    twins = {"/d/a/a-patient1-0.png": "/d/a/a-patient2-1.png", "/d/a/a-patient2-0.png": "/d/a/a-patient3-0.png"}
    for seed in range(8):
        grouped = class_folders.split_files(files, labels, 0.3, seed, group_by=r"-(patient\d+)-", twins=twins)
        side_of = {f: side for side in grouped for f, _ in grouped[side]}
        assert {side_of[f] for f in files if re.search(r"-patient[123]-", f)} == {"train"}
        plain = class_folders.split_files(files, labels, 0.3, seed, twins=twins)
        side_of = {f: side for side in plain for f, _ in plain[side]}
        assert all(side_of[f] == side_of[twin] == "train" for f, twin in twins.items())
        assert sorted(f for f, _ in plain["train"] + plain["test"]) == sorted(files)
        assert collections.Counter(label for _, label in plain["test"]) == {0: 6, 1: 6}  # round(20 x 0.3) each


def test_a_class_too_small_to_split_is_one_line_naming_it_and_a_fix_that_works():
    with pytest.raises(InputDataError, match=r"^class 'b' has 1 image, and a class needs one to train on and one "
                                             "to test on; add images of it, or move its folder out"):
        class_folders.split_files(["/a/1", "/a/2", "/a/3", "/b/1"], [0, 0, 0, 1], 0.3, class_names=["a", "b"])
    with pytest.raises(InputDataError, match=r"^class 'b' has 1 image left for training, .* one to validate on"):
        class_folders.split_files(["/a/1", "/a/2", "/a/3", "/b/1"], [0, 0, 0, 1], 0.3, class_names=["a", "b"],
                                  held_out=("validation", "--validation-fraction"))
    # two images: a fraction that rounds to all of them in test leaves none to train on, and the flag can help
    with pytest.raises(InputDataError, match=r"the train split has no image of class 'b' \(2 images\) with "
                                             "--test-fraction 0.8; .* or change --test-fraction"):
        class_folders.split_files(["/a/1", "/a/2", "/a/3", "/b/1", "/b/2"], [0, 0, 0, 1, 1], 0.8,
                                  class_names=["a", "b"])


def test_a_folder_of_100000_images_is_scanned_and_split(tmp_path):
    """Real size: 100,000 small images (hard links to 4 files of each format) in 10 class folders."""
    sources = {}
    for mode, fmt, ext in (("RGB", "JPEG", ".jpg"), ("P", "PNG", ".png"), ("RGB", "BMP", ".bmp"),
                           ("RGB", "GIF", ".gif")):
        sources[ext] = str(tmp_path / f"source{ext}")
        with open(sources[ext], "wb") as f:
            f.write(encode(draw_shape("circle", 32, np.random.default_rng(0)), mode, fmt))
    root = tmp_path / "big"
    for c in range(10):
        folder = root / f"class {c}"
        folder.mkdir(parents=True)
        for i in range(10000):
            ext = (".jpg", ".png", ".bmp", ".gif")[i % 4]
            os.link(sources[ext], folder / f"{i:05d}{ext}")
    start = time.perf_counter()
    folders = class_folders.scan_class_folders(str(root))
    files, labels = folders.scans["all"].good()
    split = class_folders.split_files(files, labels, 0.2, seed=0)
    seconds = time.perf_counter() - start
    print(f"scanned and split {len(files)} images in {seconds:.1f} s")  # for the README; not asserted
    assert len(files) == 100000 and not folders.scans["all"].problems
    assert len(split["test"]) == 20000 and collections.Counter(l for _, l in split["test"]) == dict.fromkeys(
        range(10), 2000)


def test_a_folder_of_one_class_s_images_names_its_parent(tmp_path):
    write_images(str(tmp_path / "shapes" / "circle"), 3)
    with pytest.raises(InputDataError, match=re.escape(f"{tmp_path}/shapes/circle holds 3 image(s) and no class "
                                                       f"folders: it looks like one class's folder; pass --data-dir "
                                                       f"{tmp_path}/shapes, whose every folder is a class")):
        class_folders.scan_class_folders(str(tmp_path / "shapes" / "circle"))
    for split in ("train", "test"):  # a split layout without class folders
        write_images(str(tmp_path / "split" / split), 2)
    with pytest.raises(InputDataError, match=r"train holds 2 image\(s\) and no class folders; train/ and test/ each "
                                             "need one folder of images per class"):
        class_folders.scan_class_folders(str(tmp_path / "split"))
    write_images(str(tmp_path / "one" / "only"), 3)
    with pytest.raises(InputDataError, match="holds 1 class folder"):
        class_folders.scan_class_folders(str(tmp_path / "one"))


def test_a_folder_that_cannot_be_read_is_an_error_not_images_left_out(tmp_path):
    # os.walk leaves an unreadable folder out without a word: its images were neither trained on nor classified.
    import shutil
    import subprocess
    import sys
    from tests.conftest import ROOT
    make_shapes_folder(tmp_path / "data", per_class=2)
    locked = tmp_path / "data" / "circle" / "more"
    locked.mkdir()
    locked.chmod(0)
    # Root reads any folder: without the capabilities that let it, it meets permissions as a user does.
    unprivileged = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search"] if os.geteuid() == 0 else []
    if unprivileged and not shutil.which("setpriv"):
        pytest.skip("setpriv (util-linux) is needed to read folders without root's privileges")
    code = ("import sys; from acquisition import class_folders\n"
            "try:\n    class_folders.walk_images(sys.argv[1])\nexcept PermissionError as e:\n    print(e.filename)")
    try:
        result = subprocess.run(unprivileged + [sys.executable, "-c", code, str(tmp_path / "data")], cwd=ROOT,
                                capture_output=True, text=True, timeout=60)
    finally:
        locked.chmod(0o755)
    assert result.stdout.strip() == str(locked), result.stdout + result.stderr
