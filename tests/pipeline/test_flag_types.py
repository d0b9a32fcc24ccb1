"""pipeline.flag_types: the argparse types that turn a flag's text into its value or one line."""
import argparse

import pytest

from pipeline.flag_types import name_list, names_text


@pytest.mark.parametrize("text, names", [
    ("none", None), (" NONE ", None),  # no referral decision
    ("CNV,DME", ("CNV", "DME")), (" CNV , DME ", ("CNV", "DME")),
    ('"none"', ("none",)), ('"none",other', ("none", "other")),  # a class called none
    ('"a,b",c', ("a,b", "c")), ('c, "a,b"', ("c", "a,b")),  # a class whose name has a comma
    ('"say ""hi""",x', ('say "hi"', "x")), ('a""b,c', ('a""b', "c")),  # quotes inside names
    ('"none" , CNV', ("none", "CNV")), (' "none" ', ("none",)),  # spaces around a quoted name
])
def test_names_are_read_as_csv_fields(text, names):
    assert name_list(text) == names


@pytest.mark.parametrize("text, words", [
    ("CNV,", "expected comma-separated names such as CNV,DME"), ("", "expected comma-separated names"),
    (",", "expected comma-separated names"), ('"a,b', "a quote is not closed"),
    ("CNV,DME,CNV", "names CNV twice; give each name once"), ('"a",a', "names a twice"),
])
def test_names_that_cannot_be_read_are_one_line(text, words):
    with pytest.raises(argparse.ArgumentTypeError, match=words):
        name_list(text)


@pytest.mark.parametrize("names", [("CNV", "DME"), ("none", "sick"), ("a,b", "c"), ('say "hi"', "x"), ("None",)])
def test_names_are_written_as_they_are_read_back(names):
    assert name_list(names_text(names)) == names
    assert names_text(()) == "none" and name_list(names_text(())) is None
