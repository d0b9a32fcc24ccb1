"""Generated image folders for the images job's tests: shapes in every format it reads."""
import io
import os

import numpy as np
from PIL import Image, ImageDraw

SHAPE_CLASSES = ("circle", "square", "plus sign")  # one folder name with a space
# (PIL mode, format, extension): RGB, RGBA, palette and gray images, 16-bit PNGs, BMPs and GIFs
FORMATS = (("RGB", "JPEG", ".jpg"), ("RGBA", "PNG", ".png"), ("P", "PNG", ".PNG"), ("L", "PNG", ".png"),
           ("RGB", "BMP", ".bmp"), ("RGB", "GIF", ".gif"), ("I;16", "PNG", ".png"), ("L", "JPEG", ".JPEG"))


def draw_shape(shape, size, rng):
    """Returns an RGB PIL image of `size` pixels: a bright, randomly coloured `shape` on a dark
    background, at a random place and scale."""
    image = Image.new("RGB", (size, size), tuple(int(v) for v in rng.integers(0, 60, 3)))
    draw = ImageDraw.Draw(image)
    extent = rng.uniform(0.45, 0.8) * size
    x0, y0 = rng.uniform(0, size - extent, 2)
    box = (x0, y0, x0 + extent, y0 + extent)
    colour = tuple(int(v) for v in rng.integers(140, 256, 3))
    if shape == "circle":
        draw.ellipse(box, fill=colour)
    elif shape == "square":
        draw.rectangle(box, fill=colour)
    else:
        bar = extent / 4
        draw.rectangle((x0 + 1.5 * bar, y0, x0 + 2.5 * bar, y0 + extent), fill=colour)
        draw.rectangle((x0, y0 + 1.5 * bar, x0 + extent, y0 + 2.5 * bar), fill=colour)
    return image


def encode(image, mode, fmt):
    """Returns the bytes of the RGB `image` converted to `mode` and saved as `fmt`."""
    if mode == "I;16":  # 16-bit gray: the 8-bit levels scaled to 16 bits
        converted = Image.fromarray(np.asarray(image.convert("L")).astype(np.uint16) * 257)
    else:
        converted = image.convert(mode)
    out = io.BytesIO()
    converted.save(out, fmt)
    return out.getvalue()


def make_shapes_folder(root, per_class=60, seed=0, classes=SHAPE_CLASSES):
    """Writes DIR/<class>/<n><ext> shapes in the FORMATS in turn, 24 to 64 pixels wide, and a few
    junk files; returns `root`."""
    rng = np.random.default_rng(seed)
    for name in classes:
        os.makedirs(os.path.join(root, name))
        for i in range(per_class):
            mode, fmt, ext = FORMATS[i % len(FORMATS)]
            image = draw_shape(name, int(rng.integers(24, 65)), rng)
            with open(os.path.join(root, name, f"{i:03d}{ext}"), "wb") as f:
                f.write(encode(image, mode, fmt))
    for junk in (os.path.join(classes[0], ".DS_Store"), os.path.join(classes[1], "Thumbs.db"), "README.txt",
                 os.path.join(classes[0], "notes.txt")):
        with open(os.path.join(root, junk), "wb") as f:
            f.write(b"not an image\n")
    return root


def _stripes(size, rng):
    """Returns a [size, size] float array in [0, 1]: stripes at a random angle and period."""
    angle, period = rng.uniform(0, np.pi), rng.uniform(3, 10) * size / 64
    yy, xx = np.mgrid[0:size, 0:size]
    return 0.5 + 0.5 * np.sin(2 * np.pi * (xx * np.cos(angle) + yy * np.sin(angle)) / period)


def draw_textured_shape(shape, size, rng, noise=20.0):
    """Returns an RGB PIL image of `size` pixels, harder than draw_shape's: `shape` filled with a
    striped texture over another striped background, colours drawn from overlapping ranges, a few
    distractor lines, a random place and scale, and Gaussian pixel noise of std `noise`."""
    mask_image = Image.new("L", (size, size), 0)
    draw = ImageDraw.Draw(mask_image)
    extent = rng.uniform(0.35, 0.8) * size
    x0, y0 = rng.uniform(0, size - extent, 2)
    if shape == "circle":
        draw.ellipse((x0, y0, x0 + extent, y0 + extent), fill=255)
    elif shape == "square":
        draw.rectangle((x0, y0, x0 + extent, y0 + extent), fill=255)
    else:
        bar = extent / 4
        draw.rectangle((x0 + 1.5 * bar, y0, x0 + 2.5 * bar, y0 + extent), fill=255)
        draw.rectangle((x0, y0 + 1.5 * bar, x0 + extent, y0 + 2.5 * bar), fill=255)
    lines = ImageDraw.Draw(mask_image)
    for _ in range(2):  # distractor strokes with the shape's texture, crossing anything
        lines.line(tuple(rng.uniform(0, size, 4)), fill=255, width=max(1, size // 32))
    mask = np.asarray(mask_image, np.float32)[..., None] / 255
    low, high = rng.uniform(0, 150, (2, 3)), rng.uniform(80, 255, (2, 3))
    background = low[0] + (high[0] - low[0]) * _stripes(size, rng)[..., None]
    foreground = low[1] + (high[1] - low[1]) * _stripes(size, rng)[..., None]
    pixels = mask * foreground + (1 - mask) * background + rng.normal(0, noise, (size, size, 3))
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))


def make_textured_shapes_folder(root, per_class=300, seed=0, sizes=(32, 97), gray=False, classes=SHAPE_CLASSES):
    """Writes DIR/<class>/<n>.png images of draw_textured_shape, `sizes` (low, high exclusive) pixels
    wide, gray (mode L) or colour; returns `root`."""
    rng = np.random.default_rng(seed)
    for name in classes:
        os.makedirs(os.path.join(root, name))
        for i in range(per_class):
            image = draw_textured_shape(name, int(rng.integers(*sizes)), rng)
            image.convert("L" if gray else "RGB").save(os.path.join(root, name, f"{i:03d}.png"))
    return root
