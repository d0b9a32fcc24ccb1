"""A task's end of the launcher's lifeline: when the launcher dies, the task ends too.

The launcher keeps the write end of a pipe and gives each task the read end
(its descriptor in LIFELINE_VARIABLE). Reading it returns end-of-file only once
the launcher is gone, whatever killed it (kill -9 included). The task's output,
whose reader died with the launcher, then goes to /dev/null, so that logging
neither fails nor blocks; the task sends itself one SIGTERM, which the stop-signal
handling answers with a checkpoint; and a task still running `grace_secs` later
exits at once.

Not a parent-death signal (prctl PR_SET_PDEATHSIG): the kernel sends that again
each time the task is handed on to another of the dying launcher's threads, and
a second SIGTERM stops a job at once, without its checkpoint.
"""
import contextlib
import os
import signal
import threading
import time

LIFELINE_VARIABLE = "LOCAL_CLUSTER_LIFELINE_FD"
GRACE_VARIABLE = "LOCAL_CLUSTER_GRACE_SECS"
LAUNCHER_LOST_EXIT = 137  # as if killed by SIGKILL after the grace period, which the launcher would have sent


@contextlib.contextmanager
def held_lifeline():
    """Holds a lifeline for one child started inside the block (a tool's training run or benchmark, not
    a cluster: the launcher keeps its own); yields (the child's environment, the descriptor to pass it
    with pass_fds). A child that follows it (follow_launcher) ends when this process dies."""
    lifeline, held = os.pipe()
    try:
        yield dict(os.environ, **{LIFELINE_VARIABLE: str(lifeline)}), lifeline
    finally:
        os.close(lifeline)
        os.close(held)


def follow_launcher(environ=None):
    """Starts watching the lifeline named in the environment; returns the watching thread, or None
    when this process was not started by the launcher."""
    environ = os.environ if environ is None else environ
    try:
        fd = int(environ.pop(LIFELINE_VARIABLE))  # once: a second watch would stop the job twice
        os.fstat(fd)
    except (KeyError, ValueError, OSError):
        return None
    os.set_inheritable(fd, False)  # this task's own subprocesses do not keep the launcher "alive"
    grace_secs = float(environ.get(GRACE_VARIABLE, "30"))
    thread = threading.Thread(target=_watch, args=(fd, grace_secs), daemon=True, name="launcher-lifeline")
    thread.start()
    return thread


def _watch(fd, grace_secs):
    while os.read(fd, 1):
        pass
    silence_output()
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(grace_secs)
    os._exit(LAUNCHER_LOST_EXIT)  # the main thread may be blocked inside TensorFlow: nothing else ends it


def silence_output():
    """Points this process's stdout and stderr at /dev/null (their reader is gone)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for fd in (1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
