"""The matrix of combinations' design (tests/scripts/test_matrix.py): each job's factors, the rule that
refuses a cell, the pairs no cell can run, the all-pairs cells, and each cell's command line."""
from pipeline.tasks.fashion import TASK as FASHION
from pipeline.tasks.images import TASK as IMAGES
from pipeline.tasks.oct import TASK as OCT
from tests.allpairs import all_pairs, refused_cell

DEVICES = ("1", "mirrored", "central_storage")
# mixing 'on': --mixup, --cutmix and --label-smoothing together (placed after validation: there it adds no cell);
# optimizer 'sgd': --optimizer sgd with a --learning-rate and --weight-decay (anywhere it adds one cell, to images).
COMMON = {"devices": DEVICES, "precision": ("fp32", "bf16"), "validation": ("on", "off"), "mixing": ("off", "on"),
          "early_stop": ("off", "patience", "target"), "augment": ("off", "on"), "deterministic": ("off", "on"),
          "optimizer": ("adam", "sgd")}
# Each job's factors, its data first: the real data (Fashion: its shipped 1,000-image sample, as a first
# run offline falls back to; OCT: the real scans in the repo; images: a generated folder of class
# folders), --synthetic, and what the job has beside (OCT: prepare_oct.py's shards, --cache memory).
# Last, what a cell does once trained: eval_only 'on' evaluates the model dir again with --eval-only (a
# factor, not a step of every cell: it meets every other value in a third of the cells, and adds one).
AFTER = {"eval_only": ("off", "on")}
FACTORS = {
    "fashion": {"data": ("sample", "synthetic"), **COMMON, **AFTER},
    "oct": {"data": ("jpeg", "synthetic", "records", "cache"), **COMMON, **AFTER},
    "images": {"data": ("folder", "synthetic"), **COMMON, "class_weight": ("none", "balanced"), **AFTER},
}
TASKS = {"fashion": FASHION, "oct": OCT, "images": IMAGES}
STOP_FLAGS = {"patience": "--patience", "target": "--stop-at-accuracy"}
HAS_VALIDATION_SPLIT = ("sample", "jpeg", "cache", "folder")  # data a validation split is held out of


def refusal(cell):
    """Returns what the one-line refusal of `cell` says (a fragment of it), or None: it runs."""
    stop_flag = STOP_FLAGS.get(cell["early_stop"])
    if cell["data"] == "records" and (cell["validation"] == "on" or stop_flag):
        return "--records-dir's shards hold no file names"  # so no split by patient
    if cell.get("class_weight") == "balanced" and cell["data"] == "synthetic":
        return "--class-weight balanced weighs each class by its count of training images, and --synthetic data"
    if cell["data"] == "synthetic" and cell["validation"] == "on":
        return "--validation-fraction 0.1 holds out a share of the training data, and --synthetic data"
    if stop_flag and cell["validation"] == "off":
        return f"{stop_flag} stops training on the validation split's accuracy"
    return None


# The pairs of values no cell can run with, and why: each is refused (test_refused_cells).
IMPOSSIBLE = {
    "fashion": {
        (("validation", "off"), ("early_stop", "patience")): "early stopping watches a validation split",
        (("validation", "off"), ("early_stop", "target")): "early stopping watches a validation split",
        (("data", "synthetic"), ("validation", "on")): "one generated batch repeated: nothing to hold out",
        (("data", "synthetic"), ("early_stop", "patience")): "no validation split on --synthetic",
        (("data", "synthetic"), ("early_stop", "target")): "no validation split on --synthetic",
    },
}
IMPOSSIBLE["oct"] = {
    **IMPOSSIBLE["fashion"],
    (("data", "records"), ("validation", "on")): "the shards hold no file names to split by patient",
    (("data", "records"), ("early_stop", "patience")): "no validation split on the shards",
    (("data", "records"), ("early_stop", "target")): "no validation split on the shards",
}
IMPOSSIBLE["images"] = {
    **IMPOSSIBLE["fashion"],
    (("data", "synthetic"), ("class_weight", "balanced")): "generated data has no class counts to balance",
}


def cost(cell):
    return cell["devices"] != "1"  # a tie between two cells goes to the one on 1 replica


def refused_cells(design):
    """Returns [(job, cell)]: for each pair no cell of `design` can run, a cell holding it (see refused_cell)."""
    cells = []
    for job, (_, impossible) in design.items():
        for pair in impossible:
            cell, _ = refused_cell(FACTORS[job], refusal, pair, impossible)
            if (job, cell) not in cells:
                cells.append((job, cell))
    return cells


DESIGN = {job: all_pairs(factors, refusal, cost) for job, factors in FACTORS.items()}
CELLS = [(job, cell) for job, (cells, _) in DESIGN.items() for cell in cells]
REFUSED = refused_cells(DESIGN)


def cell_id(job_cell):
    job, cell = job_cell
    return f"{job}-" + "-".join(f"{k}={v}" for k, v in cell.items())


# --- what a cell runs -------------------------------------------------------------------------------

# Batches large enough that an evaluation takes few steps, small enough for 2 replicas on the real samples.
PER_REPLICA_BATCH = {"fashion": 32, "oct": 8, "images": 16}
JOB_FLAGS = {"fashion": ["--batch-size", "32"],
             "oct": ["--image-size", "32", "--weights", "none", "--batch-size", "8"],
             "images": ["--image-size", "32", "--batch-size", "16"]}
MAX_STEPS, EVERY = 4, 2
SGD_RATE, SGD_WEIGHT_DECAY = 0.01, 5e-4
SYNTHETIC_TEST = {"fashion": 1000, "oct": 100, "images": 200}  # --synthetic's test sets, cut (see below)
DEVICE_FLAGS = {"1": [], "mirrored": ["--cpu-replicas", "2"],
                "central_storage": ["--strategy", "central_storage", "--cpu-replicas", "2"]}
DISTRIBUTION = {"1": "1 replica on the CPU", "mirrored": "MirroredStrategy over 2 logical CPU devices",
                "central_storage": "CentralStorageStrategy: variables on /cpu:0, compute over 2"}
AUGMENT = [["flip", "horizontal"], ["rotate", 10.0]]
MIXING = {"mixup": 0.2, "cutmix": 1.0, "label_smoothing": 0.1, "mix_switch_prob": 0.5}  # results.json's, 'on'
MIXING_OFF = {"mixup": 0.0, "cutmix": 0.0, "label_smoothing": 0.0, "mix_switch_prob": None}
DATA_SOURCE = {"sample": "real (shipped 1,000-image sample)", "jpeg": "real", "cache": "real", "folder": "real",
               "records": "real (prepared shards)", "synthetic": "synthetic"}


def command(job, cell, data, model_dir):
    """Returns the command line (without the script) of `cell` of `job`, on the fixtures' `data`."""
    flags = ["--model-dir", model_dir, *JOB_FLAGS[job], "--max-steps", str(MAX_STEPS), "--warm-up-steps", "1",
             "--bootstrap-resamples", "10", *data[cell["data"]], *DEVICE_FLAGS[cell["devices"]]]
    flags += ["--precision", cell["precision"]]  # explicit: the default, auto, picks by the CPU
    if cell["validation"] == "off":
        flags += ["--validation-fraction", "0"]
    else:  # the default split; data that holds none is refused only when one is asked for
        flags += ["--eval-every-steps", str(EVERY)]
        if cell["data"] not in HAS_VALIDATION_SPLIT:
            flags += ["--validation-fraction", "0.1"]
    flags += {"off": [], "patience": ["--patience", "1"],
              "target": ["--stop-at-accuracy", "0"]}[cell["early_stop"]]  # any accuracy reaches 0: a sure stop
    if cell["augment"] == "on":
        flags += ["--augment", "flip,rotate"]
    if cell["mixing"] == "on":
        flags += ["--mixup", "0.2", "--cutmix", "1.0", "--label-smoothing", "0.1"]
    if cell["deterministic"] == "on":
        flags += ["--deterministic"]
    if cell.get("class_weight") == "balanced":
        flags += ["--class-weight", "balanced"]
    if cell["optimizer"] == "sgd":  # with the rate and decay it needs (Adam's cells: the job's rate, no decay)
        flags += ["--optimizer", "sgd", "--learning-rate", str(SGD_RATE), "--weight-decay", str(SGD_WEIGHT_DECAY)]
    return flags
