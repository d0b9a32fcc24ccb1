"""pipeline.flag_types: the argparse types that turn a flag's text into its value or one line."""
import argparse
import os
import re

import pytest

from pipeline.flag_types import checkpoint_folder, name_list, names_text
from tests.conftest import ROOT


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


@pytest.mark.parametrize("path, named", [("runs/exp[lr=0.1]", "["), ("runs/exp?", "?"), ("/tmp/*/m", "*"),
                                         ("gs://b/a[1]?", "[ and ?"), ("runs/a\\b", "\\")])
def test_a_checkpoint_folder_whose_path_tensorflow_reads_as_a_pattern_is_refused(path, named):
    """TensorFlow's checkpoint readers glob: runs/exp[1] found nothing (a cryptic error, a relaunch failing the same
    way), and runs/exp? matches runs/exp1's files too."""
    with pytest.raises(argparse.ArgumentTypeError, match=rf"take its {re.escape(named)} for a pattern"):
        checkpoint_folder(path)


@pytest.mark.parametrize("path", ["runs/exp (lr=0.1)", "runs/é{1}", "gs://b/m", "ram://m"])
def test_a_checkpoint_folder_without_pattern_characters_is_taken_as_it_is(path):
    assert checkpoint_folder(path) == path


@pytest.mark.parametrize("argv", [["--model-dir", "runs/a[1]"], ["--init-from", "runs/a[1]"]])
def test_the_job_s_checkpoint_folders_refuse_pattern_characters(argv, capsys):
    from pipeline.flags import build_parser
    from pipeline.tasks.fashion import TASK
    with pytest.raises(SystemExit) as exit_:
        build_parser(TASK).parse_args(["--synthetic", *argv])
    assert exit_.value.code == 2
    assert f"argument {argv[0]}: runs/a[1]: TensorFlow's checkpoint readers" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--model-dir", "--init-from"])
def test_the_job_s_checkpoint_folders_refuse_names_that_are_not_utf8(flag, capsys):
    """'runs/m\xe9' (a Latin-1 name, held by Python as '\udce9') was a traceback inside TensorFlow's checkpoint
    functions, in training, --eval-only, --init-from and predict.py alike."""
    from pipeline.flag_types import model_path
    from pipeline.flags import build_parser
    from pipeline.tasks.images import TASK
    with pytest.raises(SystemExit) as exit_:
        build_parser(TASK).parse_args(["--synthetic", flag, "runs/m\udce9"])
    assert exit_.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()[-1:]
    assert f"argument {flag}: 'runs/m\\udce9' has a name that is not UTF-8" in line and "rename it" in line
    with pytest.raises(argparse.ArgumentTypeError, match="has a name that is not UTF-8"):
        model_path("runs/m\udce9/export")


def test_predict_takes_a_tflite_file_by_any_name_and_a_model_dir_without_pattern_characters():
    from pipeline.flag_types import model_path
    assert model_path("runs/exp[1]/lite/model.tflite") == "runs/exp[1]/lite/model.tflite"  # TFLite does not glob
    with pytest.raises(argparse.ArgumentTypeError, match=r"take its \[ for a pattern"):
        model_path("runs/exp[1]")


def test_predict_s_explain_folder_that_is_empty_or_a_file_is_refused_before_any_image_is_classified(tmp_path, capsys):
    """--explain "" wrote no heatmap without a word; a file failed only after every image was classified."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("predict_script", os.path.join(ROOT, "scripts", "predict.py"))
    predict_script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(predict_script)
    (tmp_path / "image.jpg").write_bytes(b"x")
    for value, words in (("", "an empty path; pass the folder to write into"),
                         (str(tmp_path / "image.jpg"), f"{tmp_path / 'image.jpg'} is a file; pass a folder")):
        with pytest.raises(SystemExit) as exit_info:
            predict_script.build_parser().parse_args(["--model", "m", "--explain", value, "in"])
        assert exit_info.value.code == 2 and f"argument --explain: {words}" in capsys.readouterr().err
    assert predict_script.build_parser().parse_args(["--model", "m", "--explain", str(tmp_path / "new"),
                                                     "in"]).explain == str(tmp_path / "new")
