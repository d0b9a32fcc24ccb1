"""The text a PNG keeps (its tEXt chunks), read back to tell the PNGs this project wrote, which it may write
over, from anyone else's: without TensorFlow, so that a script's --help stays fast."""


def png_text(path, key):
    """Returns the text the PNG at `path` keeps under `key`, or None: no such text, not a PNG, or unreadable."""
    from PIL import Image, UnidentifiedImageError
    try:
        with Image.open(path) as image:
            return image.info.get(key) if image.format == "PNG" else None
    except (OSError, UnidentifiedImageError, ValueError):
        return None
