"""The results.json file each run writes into its model dir, and the typed record it holds."""
import dataclasses
import json
from typing import Any, Dict, List, Optional

from acquisition import storage
from acquisition.files import write_json_atomically
from pipeline.validation.best import rebased

RESULTS_FILE = "results.json"


@dataclasses.dataclass
class RunResults:
    """What a finished run reports: written to results.json in this field order, then `extra`'s
    fields (the cluster, the export, the test report's and the data's own)."""
    task: str
    data_source: str
    model_dir: str
    global_step: int
    start_global_step: int
    max_steps: int
    replicas: int
    devices: List[str]
    distribution: str
    precision: str
    augment: List
    xla: bool
    intra_op_threads: int
    inter_op_threads: int
    per_replica_batch_size: int
    global_batch_size: int
    learning_rate: Optional[float]  # the rate the optimizer applied at this run's last step, read from the graph
    learning_rate_first_step: Optional[float]
    learning_rate_base: float
    learning_rate_schedule: Dict[str, Any]
    train_examples: int
    epochs_requested: Optional[float]
    images_trained: int
    epochs_trained: float
    train_seconds: float
    train_images_per_sec: Optional[float]
    train_images_per_sec_std: Optional[float]
    train_step_time_mean: Optional[float]
    timed_steps: int
    model_flops_per_image: Dict[str, Any]
    peak_flops: Dict[str, Any]
    mfu: Optional[float]
    checkpoint_seconds: float
    checkpoints_saved: int
    loss_warnings: List[str]
    eval_examples: int
    eval_accuracy: float
    eval_loss: float
    tensorflow_version: str
    # Validation (see pipeline.validation): its size, each evaluation, the best, why training ended, and
    # the step of the checkpoint the test figures belong to (the best one; the last without validation).
    validation_examples: int = 0
    evaluations: List[Dict[str, Any]] = dataclasses.field(default_factory=list)
    best: Optional[Dict[str, Any]] = None
    # 'max_steps', 'target_accuracy' or 'patience'; never 'signal': a signalled run exits 130/143 with its
    # checkpoint and best export, and writes no results.json (docs/validation.md). 'unfinished' in what an
    # --eval-only run of checkpoints whose training stopped before its `max_steps` prints.
    stopped_because: str = "max_steps"
    # The rule that applied: {'monitor': 'validation_accuracy', 'stop_at_accuracy', 'patience', 'min_delta'}.
    early_stopping: Optional[Dict[str, Any]] = None
    eval_step: Optional[int] = None
    validation_seconds: float = 0.0
    deterministic: bool = False  # --deterministic: op determinism, and `seed` for every random source
    seed: Optional[int] = None  # --seed, or 0 for --deterministic without it
    # --precision auto: what was asked ('auto', else the precision itself) and why `precision` was picked.
    precision_requested: Optional[str] = None
    precision_reason: Optional[str] = None
    # --conv-gradients as applied ('matmul' or 'onednn'), and why auto picked it (None when asked).
    conv_gradients: str = "onednn"
    conv_gradients_reason: Optional[str] = None
    # The training labels' treatment (pipeline.mixing): 0 off; the switch null unless both methods are on.
    label_smoothing: float = 0.0
    optimizer: str = "adam"  # --optimizer, and its decoupled --weight-decay (0: none)
    weight_decay: float = 0.0
    mixup: float = 0.0
    cutmix: float = 0.0
    mix_switch_prob: Optional[float] = None
    # --ema: {'decay', 'step', 'averaged': {'accuracy', 'loss'}, 'raw': {...}}, the final step's test figures of
    # the averaged weights (which every figure above reads) and of the raw weights; None without --ema.
    ema: Optional[Dict[str, Any]] = None
    # --init-from: the weights the model dir's first run started from (pipeline.initial_weights.InitialWeights'
    # fields: model_dir, checkpoint, step, chosen, averaged); None for a run started from scratch.
    init_from: Optional[Dict[str, Any]] = None
    extra: Dict[str, Any] = dataclasses.field(default_factory=dict)

    def as_dict(self):
        """Returns the results as results.json holds them: the fields, then `extra`'s."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "extra"}
        return {**fields, **self.extra}


def write_results(model_dir, results):
    """Writes `results` (a dict or RunResults) as JSON to <model_dir>/results.json atomically (see
    write_json_atomically); returns the path."""
    if isinstance(results, RunResults):
        results = results.as_dict()
    return write_json_atomically(storage.join(model_dir, RESULTS_FILE), results)


def read_results(model_dir):
    """Returns the dict stored in <model_dir>/results.json."""
    return json.loads(storage.read_text(storage.join(model_dir, RESULTS_FILE)))


def recorded_here(results, model_dir):
    """Returns `results` (results.json's dict) with each path it records under the model dir it was written
    in (its `model_dir`) rewritten under `model_dir`, where that folder is now: moved or copied (renamed,
    rsynced from a cluster), its exports and TFLite files are its own."""
    then, now = results.get("model_dir"), storage.absolute(model_dir)
    if not then or then == now:
        return results

    def here(value):
        if isinstance(value, str) and (value == then or value.startswith(then.rstrip("/") + "/")):
            return now + value[len(then):]
        if isinstance(value, dict):
            return {key: here(item) for key, item in value.items()}
        if isinstance(value, list):
            return [here(item) for item in value]
        return value
    return here(results)


def _recorded(model_dir):
    """Returns the dict of the model dir's results.json, or {} when it is missing, unreadable or no dict."""
    try:
        recorded = read_results(model_dir)
    except (OSError, ValueError):
        return {}
    return recorded if isinstance(recorded, dict) else {}


def recorded_stop(model_dir, step):
    """Returns why the run whose results.json the model dir holds stopped training ('patience', say), when
    it ended at global `step`, or None: an --eval-only run of its checkpoints reports the training's
    reason, not one its own flags would give."""
    recorded = _recorded(model_dir)
    return recorded.get("stopped_because") if recorded.get("global_step") == step else None


def recorded_export(model_dir, step):
    """Returns the export the model dir's results.json names for the checkpoint of global `step`, when it
    is there still, or None: what an --eval-only run of that checkpoint reports rather than export it
    again (each export is a new timestamped folder, which predict.py --model <model dir> takes as the
    newest)."""
    from serving.export import is_whole  # imports TensorFlow: only when a run asks
    recorded = _recorded(model_dir)
    export_dir = rebased(recorded.get("export_dir"), model_dir)  # recorded where the model dir was then
    if recorded.get("eval_step") != step or not export_dir or not is_whole(export_dir):
        return None
    return export_dir
