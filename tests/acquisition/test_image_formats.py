"""Every format the images job reads decodes as PIL sees it, and odd files are named, one line each."""
import io

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from input_fns import decode
from acquisition.image_formats import check_image, is_image_name
from tests.images_data import FORMATS, draw_shape, encode


@pytest.fixture(scope="module")
def picture():
    return draw_shape("circle", 40, np.random.default_rng(1))


@pytest.mark.parametrize("mode,fmt,ext", FORMATS)
@pytest.mark.parametrize("channels", [1, 3])
def test_each_format_decodes_to_what_pil_reads(picture, tmp_path, mode, fmt, ext, channels):
    data = encode(picture, mode, fmt)
    path = tmp_path / f"image{ext}"
    path.write_bytes(data)
    check = check_image(str(path), channels)
    assert check.problem is None and check.gray == (mode in ("L", "I;16"))
    decoded = decode.decode_image(tf.constant(data), channels).numpy()
    reference = Image.open(io.BytesIO(data))
    if mode == "I;16":
        reference = Image.fromarray((np.asarray(reference) // 257).astype(np.uint8))
    expected = np.asarray(reference.convert("RGB")).astype(int)
    assert decoded.shape == (40, 40, channels)
    if channels == 1:  # each decoder's own gray conversion: within rounding of ITU-R 601
        expected = np.asarray(reference.convert("RGB").convert("L"))[..., None].astype(int)
    difference = np.abs(decoded.astype(int) - expected)
    if fmt == "JPEG":  # libjpeg-turbo and PIL's libjpeg upsample chroma a little differently
        assert difference.mean() < 2 and difference.max() <= 8
    else:
        assert difference.max() <= 1


def test_animated_gifs_give_their_first_frame(picture):
    out = io.BytesIO()
    picture.save(out, "GIF", save_all=True, append_images=[picture.rotate(90)])
    first = np.asarray(Image.open(io.BytesIO(out.getvalue())).convert("RGB"))
    np.testing.assert_array_equal(decode.decode_image(tf.constant(out.getvalue()), 3).numpy(), first)


def odd_files(picture):
    """Returns {name: (bytes, the start of the one line naming its problem)}."""
    png, gif, bmp = (encode(picture, m, f) for m, f in (("RGB", "PNG"), ("RGB", "GIF"), ("RGB", "BMP")))
    one_bit, palette_bmp = io.BytesIO(), io.BytesIO()
    picture.convert("1").save(one_bit, "BMP")
    picture.convert("P").save(palette_bmp, "BMP")
    return {
        "text.png": (b"hello, not a picture\n", "is not a JPEG, PNG, BMP or GIF image"),
        "empty.jpg": (b"", "is empty"),
        "cut.png": (png[:len(png) // 2], "is truncated (no PNG end chunk)"),
        "cut.gif": (gif[:len(gif) // 2], "is truncated (no GIF trailer)"),
        "cut.bmp": (bmp[:20], "is truncated (no BMP header)"),
        "one-bit.bmp": (one_bit.getvalue(), "is a 1-bit BMP; TensorFlow decodes 8-bit (gray), 24- and 32-bit"),
        "palette.bmp": (palette_bmp.getvalue(), "is an 8-bit palette BMP, which TensorFlow decodes as gray"),
        "rle.bmp": (bmp[:30] + (1).to_bytes(4, "little") + bmp[34:], "is a compressed BMP (method 1)"),
    }


def test_odd_files_are_named_one_line_each(picture, tmp_path):
    for name, (data, problem) in odd_files(picture).items():
        (tmp_path / name).write_bytes(data)
        found = check_image(str(tmp_path / name)).problem
        assert found.startswith(problem) and "\n" not in found, (name, found)
    assert check_image(str(tmp_path / "absent.png")).problem == "cannot be read (No such file or directory)"


def test_image_names_are_matched_without_regard_to_case():
    assert all(is_image_name(n) for n in ("a.JPG", "b.jpeg", "c.Png", "d.BMP", "e.gif", "f g.jpe"))
    assert not any(is_image_name(n) for n in (".DS_Store", "Thumbs.db", "notes.txt", "._a.jpg", "a.jpg.txt"))


def test_a_jpeg_named_png_is_read_by_its_contents(picture, tmp_path):
    path = tmp_path / "really-a-jpeg.png"
    path.write_bytes(encode(picture, "RGB", "JPEG"))
    assert check_image(str(path)).problem is None
    assert decode.decode_image(tf.io.read_file(str(path)), 3).shape == (40, 40, 3)


def test_grayscale_bmps_with_a_gray_palette_are_gray(picture, tmp_path):
    path = tmp_path / "gray.bmp"
    path.write_bytes(encode(picture, "L", "BMP"))
    assert check_image(str(path)).gray
