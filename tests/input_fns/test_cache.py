"""tf.data cache files on a URL (ram:// here): locked by a lease, described, and complete once written."""
import json

import tensorflow as tf

from acquisition import storage
from input_fns.cache import is_complete, prepare_cache_file


def test_a_cache_on_a_url_is_written_once_and_then_reused():
    path = prepare_cache_file("ram://caches/oct", "train", {"size": 32, "files_fingerprint": "abc"})
    assert path.startswith("ram://caches/oct/train-") and not is_complete(path)
    assert json.loads(storage.read_text(path + ".json")) == {"size": 32}
    assert json.loads(storage.read_text(path + ".lock"))["owner"]  # the writer's lease
    first = list(tf.data.Dataset.range(5).cache(path).as_numpy_iterator())
    assert first == list(range(5)) and is_complete(path)
    assert prepare_cache_file("ram://caches/oct", "train", {"size": 32, "files_fingerprint": "abc"}) == path
    assert list(tf.data.Dataset.range(0).cache(path).as_numpy_iterator()) == first  # read back from the cache
