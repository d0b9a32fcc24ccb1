"""Kill points for the fault tests: a process that passes a named point for the Nth time kills itself
there with SIGKILL, as a scheduler or the kernel would at that moment, or DELAY_MS later on a timer,
so that the kill lands inside the work that follows the point (a checkpoint being written, say).

Off unless KILL_VARIABLE is set, as tests set it for one process: "POINT:N" or "POINT:N:DELAY_MS".
PAUSE_VARIABLE ("POINT:N:PAUSE_MS") pauses the process there instead, as a slow disk or a long
evaluation would.
The points: 'checkpoint' (before each checkpoint write), 'validation' (before each evaluation of the
validation split), 'best_copy' (between two files of the best checkpoint's copy), 'best_export' (before
the best model's export), 'test_evaluation' (before the test evaluation) and 'write NAME' (a file
written atomically, between its temporary copy and the rename: 'write results.json').
"""
import os
import signal
import threading
import time

KILL_VARIABLE = "PIPELINE_KILL_AT"
PAUSE_VARIABLE = "PIPELINE_PAUSE_AT"
_passes = {}


def point(name):
    """Passes the kill point `name`; returns nothing (the process is killed when KILL_VARIABLE names
    this pass, and paused when PAUSE_VARIABLE does)."""
    _passes[name] = _passes.get(name, 0) + 1
    pause_ms = _named_pass(PAUSE_VARIABLE, name)
    if pause_ms:
        time.sleep(int(pause_ms) / 1000)
    delay_ms = _named_pass(KILL_VARIABLE, name)
    if delay_ms is None:
        return
    if delay_ms:
        timer = threading.Timer(int(delay_ms) / 1000, _kill)
        timer.daemon = True
        timer.start()
    else:
        _kill()


def _named_pass(variable, name):
    """Returns the text after "POINT:N" ('' when none, else its ":MS" without the colon) when the
    environment `variable` names this pass of the point `name`, else None."""
    spec = os.environ.get(variable)
    if not spec or not spec.startswith(name + ":"):
        return None
    count, _, milliseconds = spec[len(name) + 1:].partition(":")
    return milliseconds if _passes[name] == int(count) else None


def _kill():
    os.kill(os.getpid(), signal.SIGKILL)
