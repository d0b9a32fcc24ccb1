"""A finished run's settings and figures, written for TensorBoard's HParams dashboard.

Each model dir becomes one session of the dashboard: its settings (batch, replicas,
precision, learning rate and schedule, model, augmentation) as hyperparameters, and
its final figures as scalars tagged `final/...` at the run's last step. Point
TensorBoard at the folder holding several model dirs to compare them.
"""
import time

from tensorboard.plugins.hparams import summary_v2 as hparams_summary
from tensorboard.summary.writer.event_file_writer import EventFileWriter
from tensorboard.compat.proto import event_pb2, summary_pb2

from acquisition import storage

# The dashboard's metrics: tag -> the results.json field it shows (a '/'-path into nested fields).
FINAL_FIGURES = {
    "final/test_accuracy": "eval_accuracy",
    "final/test_loss": "eval_loss",
    "final/test_ece": "clinical/calibration/ece/value",
    "final/best_validation_accuracy": "best/validation_accuracy",
    "final/images_per_sec": "train_images_per_sec",
    "final/mfu": "mfu",
}
EVENTS_SUFFIX = ".hparams"


def run_settings(results):
    """Returns the run's settings as HParams values (str, float, int or bool), read from `results`."""
    schedule = results.get("learning_rate_schedule") or {}
    augment = results.get("augment") or []
    return {
        "task": results["task"],
        "model": results.get("model") or results["task"],
        "per_replica_batch": int(results["per_replica_batch_size"]),
        "global_batch": int(results["global_batch_size"]),
        "replicas": int(results["replicas"]),
        "precision": results["precision"],
        "learning_rate": float(results["learning_rate_base"]),
        "lr_schedule": str(schedule.get("kind", "constant")),
        "augment": ",".join(f"{name}={value}" for name, value in augment) or "none",
        "xla": bool(results.get("xla", False)),
        "deterministic": bool(results.get("deterministic", False)),
    }


def final_figures(results):
    """Returns {tag: value} for each of FINAL_FIGURES that `results` holds a number for."""
    figures = {}
    for tag, path in FINAL_FIGURES.items():
        value = results
        for key in path.split("/"):
            value = value.get(key) if isinstance(value, dict) else None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            figures[tag] = float(value)
    return figures


def write_hparams(model_dir, results):
    """Writes `results`' settings and final figures to an events file of its own in `model_dir`
    (any tf.io.gfile path); returns the dict of settings written."""
    settings = run_settings(results)
    step = int(results["global_step"])
    writer = EventFileWriter(model_dir, filename_suffix=EVENTS_SUFFIX)
    try:
        session = hparams_summary.hparams_pb(settings, trial_id=results.get("model_dir"),
                                             start_time_secs=time.time())
        writer.add_event(event_pb2.Event(wall_time=time.time(), step=step, summary=session))
        values = [summary_pb2.Summary.Value(tag=tag, simple_value=value)
                  for tag, value in final_figures(results).items()]
        writer.add_event(event_pb2.Event(wall_time=time.time(), step=step,
                                         summary=summary_pb2.Summary(value=values)))
    finally:
        writer.close()
    return settings


def recorded(model_dir):
    """Returns whether `model_dir` holds a whole record of write_hparams' (a kill just after results.json
    leaves it empty or cut short)."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    for path in storage.glob(storage.join(model_dir, f"events.out.tfevents.*{EVENTS_SUFFIX}")):
        if sum(event.HasField("summary") for event in EventFileLoader(path).Load()) >= 2:
            return True
    return False
