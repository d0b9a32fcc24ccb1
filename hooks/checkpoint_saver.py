"""A run's checkpoint saver that keeps to step numbers: it saves every N global steps counted from step
0, not from the step a run resumed at, and at each step a validation cadence makes due, so that an
evaluation reads the checkpoint of the very step it is due at, however the run was resumed."""
import dataclasses
import os
from typing import Callable, Optional

import tensorflow as tf


@dataclasses.dataclass(frozen=True)
class CheckpointCadence:
    """Save at every multiple of `every_steps`, and at each step for which `due(step, last saved step)`."""
    every_steps: int
    due: Optional[Callable[[int, int], bool]] = None


class CadenceTimer(tf.compat.v1.train.SecondOrStepTimer):
    """SecondOrStepTimer's step rule with multiples of the step count instead of the count since the
    last trigger, and the cadence's due steps besides."""

    def __init__(self, cadence):
        super().__init__(every_steps=cadence.every_steps)
        self._due = cadence.due

    def should_trigger_for_step(self, step):
        last = self._last_triggered_step
        if last is None:
            return True
        if step <= last:
            return False
        return step // self._every_steps > last // self._every_steps or bool(self._due and self._due(step, last))


class CadenceCheckpointSaverHook(tf.compat.v1.train.CheckpointSaverHook):
    """The Estimator's CheckpointSaverHook on a CadenceTimer, which does not save again the checkpoint a
    session was restored from. Given to the Estimator among its training hooks, it replaces the one the
    Estimator would make, and receives its saving listeners."""

    def __init__(self, checkpoint_dir, cadence, scaffold=None, save_graph_def=True):
        super().__init__(checkpoint_dir, save_steps=cadence.every_steps, scaffold=scaffold,
                         save_graph_def=save_graph_def)
        self._timer = CadenceTimer(cadence)
        self._restored_step = None

    def after_create_session(self, session, coord):
        # The Estimator's hook saves the session's state here, which on a resume is the checkpoint it was
        # restored from. TensorFlow writes a checkpoint's index in place (MergeV2Checkpoints truncates it,
        # then writes), so a kill during that needless rewrite tore the very checkpoint the run resumed from.
        step = int(session.run(self._global_step_tensor))
        self._restored_step = step if self._restored_from(step) else None
        super().after_create_session(session, coord)
        self._restored_step = None

    def _save(self, session, step):
        if step == self._restored_step:
            return False
        return super()._save(session, step)

    def _restored_from(self, step):
        """Returns whether the newest checkpoint (the one a session restores) is of global `step`."""
        newest = tf.train.latest_checkpoint(self._checkpoint_dir)
        return newest is not None and os.path.basename(newest) == f"{os.path.basename(self._save_path)}-{step}"
