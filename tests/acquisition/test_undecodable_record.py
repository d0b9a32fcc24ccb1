"""The record of the images a run could not decode: what its later runs count as bad files."""
import json
import os

from acquisition import undecodable_record


def test_a_remembered_image_stays_bad_until_it_is_replaced_and_a_removed_one_stays_left_out(tmp_path):
    record = str(tmp_path / "m" / "undecodable_images.json")
    os.makedirs(os.path.dirname(record))
    images = {name: tmp_path / f"{name}.jpg" for name in ("cut", "flipped", "removed")}
    for image in images.values():
        image.write_bytes(b"\xff\xd8" + b"x" * 100)
    assert undecodable_record.remembered(record) == {}  # no record: nothing
    undecodable_record.remember(record, {str(images["cut"]): "Invalid JPEG data", str(images["flipped"]): None})
    undecodable_record.remember(record, {str(images["removed"]): "Invalid JPEG data"})  # added to, not replaced
    assert sorted(undecodable_record.remembered(record)) == sorted(map(str, images.values()))
    stat = os.stat(images["flipped"])
    images["flipped"].write_bytes(b"\xff\xd8" + b"y" * 100)  # replaced: read again, even at its size and time
    os.utime(images["flipped"], ns=(stat.st_atime_ns, stat.st_mtime_ns))
    os.remove(images["removed"])  # gone: still no image to train on
    remembered = undecodable_record.remembered(record)
    assert sorted(remembered) == [str(images["cut"]), str(images["removed"])]
    assert remembered[str(images["cut"])].startswith("cannot be decoded (Invalid JPEG data), though its header reads "
                                                     f"well (a run of this model dir met it: {record})")
    with open(record, "w") as f:
        f.write("{not json")
    assert undecodable_record.remembered(record) == {}  # damaged: the next run that meets them finds them again
    with open(record, "w") as f:  # entries of another form, and a path through a file: no traceback
        f.write(json.dumps({"files": {str(images["cut"]): 5, str(images["cut"] / "x"): {"size": 1}}}))
    assert list(undecodable_record.remembered(record)) == [str(images["cut"] / "x")]


def test_tasks_that_remember_at_once_keep_each_others_images(tmp_path, monkeypatch):
    """Cluster tasks fail together, and each adds what it found to the model dir's record: without a lock, a
    task's read-add-write dropped what another wrote in between."""
    import threading
    import time
    from acquisition import files
    record = str(tmp_path / "undecodable_images.json")
    images = [tmp_path / f"{name}.jpg" for name in ("first", "second")]
    for image in images:
        image.write_bytes(b"\xff\xd8" + image.name.encode())
    first_writing, write = threading.Event(), files.write_json_atomically

    def slow_write(path, value):
        if not first_writing.is_set():  # the first task's write waits for the second task to have read
            first_writing.set()
            time.sleep(1.0)
        return write(path, value)
    monkeypatch.setattr(undecodable_record, "write_json_atomically", slow_write)
    first = threading.Thread(target=undecodable_record.remember, args=(record, {str(images[0]): None}))
    first.start()
    assert first_writing.wait(10)
    undecodable_record.remember(record, {str(images[1]): None})
    first.join()
    assert sorted(undecodable_record.remembered(record)) == sorted(map(str, images))
    assert sorted(os.listdir(tmp_path)) == ["first.jpg", "second.jpg", "undecodable_images.json"]  # no lock left
