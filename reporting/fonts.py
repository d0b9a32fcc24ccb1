"""Class names in plots. Matplotlib draws in one font (DejaVu Sans), which has no CJK glyphs: a Chinese or
Japanese class name came out as boxes, and two classes could not be told apart. A name is drawn in an installed
font that has the glyphs the default lacks, behind the default; a name no installed font can draw is labelled
by its index ('class 2', in brackets where a class has that name), which the report's text names."""
import functools


def class_labels(names):
    """Returns (matplotlib settings to draw the labels in, the labels of `names`): each name itself when a font
    can draw it, else 'class <its index>' (in brackets, '(class 1)', when another class is named so). The
    settings ({} when the default font draws every name) put an installed font with the missing glyphs behind the
    default."""
    default, default_chars = _default_font()
    missing = frozenset(ord(c) for name in names for c in name) - default_chars
    if not missing:
        return {}, list(names)
    fallback = _font_with_most(missing)
    drawable = default_chars | (fallback[1] if fallback else frozenset())
    labels = [name if all(ord(c) in drawable for c in name) else _index_label(i, names) for i, name in enumerate(names)]
    settings = {"font.family": [default, fallback[0]]} if fallback else {}
    return settings, labels


def named_by_index(names):
    """Returns ['class 2 = <its name>', ...]: the classes of `names` that class_labels labels by their index, for
    the text beside a plot."""
    return [f"{label} = {name}" for name, label in zip(names, class_labels(names)[1]) if label != name]


def _index_label(index, names):
    """Returns 'class <index>', bracketed until no class of `names` has that name."""
    label = f"class {index}"
    while label in names:
        label = f"({label})"
    return label


@functools.lru_cache(maxsize=None)
def _default_font():
    from matplotlib import font_manager
    path = font_manager.findfont(font_manager.FontProperties())
    font = _characters(path)
    return font if font is not None else ("sans-serif", frozenset())


@functools.lru_cache(maxsize=None)
def _font_with_most(missing):
    """Returns (family, its code points) of the installed font family, other than the default, whose regular
    face (the one matplotlib draws a family name in) has the most of the code points `missing`, the first by
    name at a tie; None when none has any."""
    from matplotlib import font_manager
    default = _default_font()[0]
    best, best_count = None, 0
    for family in sorted({entry.name for entry in font_manager.fontManager.ttflist} - {default}):
        try:
            path = font_manager.findfont(font_manager.FontProperties(family=family), fallback_to_default=False)
        except ValueError:  # no face of it matches
            continue
        font = _characters(path)
        count = len(missing & font[1]) if font is not None and font[0] == family else 0
        if count > best_count:
            best, best_count = font, count
    return best


@functools.lru_cache(maxsize=None)
def _characters(path):
    """Returns (family name, the code points it draws) of the font file at `path`; None for one that cannot be
    read."""
    from matplotlib import ft2font
    try:
        font = ft2font.FT2Font(path)
    except (OSError, RuntimeError, ValueError):
        return None
    return font.family_name, frozenset(font.get_charmap())
