import json
import os

import pytest

from pipeline.results import read_results, write_results


def test_results_round_trip_as_json(tmp_path):
    path = write_results(str(tmp_path), {"global_step": 7, "eval_accuracy": 0.5})
    assert os.path.basename(path) == "results.json"
    assert read_results(str(tmp_path)) == {"global_step": 7, "eval_accuracy": 0.5}


def test_a_failed_write_keeps_the_previous_results_whole(tmp_path):
    write_results(str(tmp_path), {"global_step": 7})
    with pytest.raises(TypeError):
        write_results(str(tmp_path), {"global_step": object()})
    assert json.loads((tmp_path / "results.json").read_text()) == {"global_step": 7}
    assert os.listdir(tmp_path) == ["results.json"]
