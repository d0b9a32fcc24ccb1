"""The image files TensorFlow's decoder refuses though their headers read well (a PNG whose data fails
its checksum, a JPEG cut short and closed again): found by decoding every image, which only a run
that has already failed on one pays for; the headers are all that is read before training
(image_formats). A run that met such files remembers them (undecodable_record)."""
import re

import tensorflow as tf

from acquisition import storage
from acquisition.class_folders import walk_images

# The decoding ops of an InvalidArgumentError raised by an image the pipeline could not decode.
DECODE_OP = re.compile(r"\bDecode(Image|Png|Jpeg|AndCropJpeg|Bmp|Gif)\b")
_NAMED = 20  # the files whose own error is read back, at most


def is_decode_failure(error):
    """Returns whether the TensorFlow `error` is an image its decoder refused."""
    return isinstance(error, tf.errors.InvalidArgumentError) and bool(DECODE_OP.search(error.message))


def image_files(folders):
    """Returns the image files below each local folder of `folders` (class_folders.walk_images), sorted."""
    found = []
    for folder in folders:
        if folder and not storage.is_url(folder) and storage.isdir(folder):
            found += walk_images(folder)[0]
    return sorted(found)


def undecodable_images(files):
    """Returns {file: TensorFlow's words} for each of `files` that TensorFlow cannot decode (the first
    _NAMED of them with their words; any more with None), decoding them all in a graph of its own."""
    with tf.Graph().as_default():
        names = tf.data.Dataset.from_tensor_slices(files).map(
            lambda path: (path, tf.shape(tf.io.decode_image(tf.io.read_file(path), expand_animations=False))),
            num_parallel_calls=tf.data.AUTOTUNE, deterministic=False).ignore_errors()
        following = tf.compat.v1.data.make_one_shot_iterator(names).get_next()[0]
        contents = tf.compat.v1.placeholder(tf.string, [])
        decoded = tf.io.decode_image(contents, expand_animations=False)
        with tf.compat.v1.Session() as session:
            read = set()
            try:
                while True:
                    read.add(session.run(following).decode())
            except tf.errors.OutOfRangeError:
                pass
            bad = [f for f in files if f not in read]
            return {f: (_words(session, decoded, contents, f) if i < _NAMED else None) for i, f in enumerate(bad)}


def _words(session, decoded, contents, path):
    """Returns TensorFlow's words for the image at `path`, decoded alone through `decoded` fed `contents`."""
    try:
        session.run(decoded, {contents: storage.read_bytes(path)})
    except tf.errors.OpError as e:
        return storage.op_error_line(e).rstrip(". ")
    except OSError as e:
        return e.strerror or str(e)
    return "it decodes when read alone"

