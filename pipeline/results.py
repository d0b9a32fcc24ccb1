"""The results.json file each run writes into its model dir."""
import json
import os
import tempfile

RESULTS_FILE = "results.json"


def write_results(model_dir, results):
    """Writes `results` as JSON to <model_dir>/results.json atomically; returns the path.

    The file is written under a temporary name and renamed, so a crash leaves
    the previous results intact rather than a truncated file.
    """
    path = os.path.join(model_dir, RESULTS_FILE)
    fd, tmp = tempfile.mkstemp(prefix=".results-", suffix=".json", dir=model_dir)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(results, f, indent=2, sort_keys=True)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        os.remove(tmp)
        raise
    return path


def read_results(model_dir):
    """Returns the dict stored in <model_dir>/results.json."""
    with open(os.path.join(model_dir, RESULTS_FILE)) as f:
        return json.load(f)
