"""The results.json file each run writes into its model dir."""
import json
import os

from acquisition.files import write_json_atomically

RESULTS_FILE = "results.json"


def write_results(model_dir, results):
    """Writes `results` as JSON to <model_dir>/results.json atomically (see write_json_atomically);
    returns the path."""
    return write_json_atomically(os.path.join(model_dir, RESULTS_FILE), results)


def read_results(model_dir):
    """Returns the dict stored in <model_dir>/results.json."""
    with open(os.path.join(model_dir, RESULTS_FILE)) as f:
        return json.load(f)
