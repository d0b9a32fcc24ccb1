"""What marks a contact sheet as inspect_input.py's: a PNG it may write over again, where any other file
at that path is someone's to keep."""
from acquisition.png_text import png_text

TITLE = "inspect_input.py contact sheet of a training batch"  # in the PNG's tEXt Title


def is_contact_sheet(path):
    """Returns whether the file at `path` is a PNG that write_contact_sheet wrote (its Title says so)."""
    return png_text(path, "Title") == TITLE
