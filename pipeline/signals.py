"""Stop signals: SIGINT (Ctrl-C), SIGTERM (Kubernetes, Slurm, preemptible VMs) and SIGHUP (a closed
terminal, a dropped ssh session) end a training run at the next step with a checkpoint, then exit
130, 143 or 129. A SIGHUP the run was started ignoring stays ignored: `nohup` ignores it so that the
run outlives the terminal. SIGINT and SIGTERM are caught even then: a shell script's `&` ignores SIGINT
for its own Ctrl-C, and a `kill -INT` sent to the run still means stop."""
import contextlib
import os
import queue
import signal
import sys
import threading
import time

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_REDELIVERY_DELAY_S = 0.01


class Interrupted(Exception):
    """The run was stopped by `signum`; `saved_at_step` is the global step of the checkpoint
    written on the way out, or None when the stop came outside training."""

    def __init__(self, signum, saved_at_step=None):
        self.signum, self.saved_at_step = signum, saved_at_step
        self.name = signal.Signals(signum).name
        super().__init__(f"stopped by {self.name}")

    @property
    def exit_code(self):
        """128 + the signal number, as a shell reports a process ended by it (130, 143, 129)."""
        return 128 + self.signum


class _Catcher:
    """What StopSignals and stop_at_once share. While entered, SIGNALS (but a SIGHUP this process was started
    ignoring: _left_ignored) go to `_handle`, whose stop `_raise` raises. A handler runs between any two bytecodes
    of the main thread, those of a weakref callback or a `__del__` the garbage collector ran among them too,
    where Python only prints what is raised ("Exception ignored in"): such a stop is sent again (_LostStops), or
    raised at the exit when that comes first. One that came out as another error is raised instead
    (_raise_instead)."""

    def __init__(self):
        self._previous = {}
        self._raised = None  # the Interrupted a handler raised last
        self._lost = self._hook = None

    def __enter__(self):
        self._lost = _LostStops()
        self._hook = _RedeliveringHook(sys.unraisablehook)
        sys.unraisablehook = self._hook  # (before the handlers, and restored after them)
        _start_redeliverer()
        for signum in SIGNALS:
            if not _left_ignored(signum):
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, exc_type, exc, traceback):
        unsent = self._lost.close()
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        sys.unraisablehook = self._hook.previous
        if exc is None and unsent is not None:
            raise unsent
        _raise_instead(exc, self._raised)
        return False

    def _handle(self, signum, frame):
        raise NotImplementedError

    def _raise(self, interrupted, frame):
        """Raises `interrupted`, the stop of a handler that interrupted `frame`; inside the unraisable hook, where
        Python would only print it, it is sent again instead, to come out once the hook has returned."""
        interrupted.lost_stops = self._lost
        self._raised = interrupted
        if _inside_the_hook(frame):
            self._lost.lose(interrupted)
            return
        raise interrupted


class StopSignals(_Catcher):
    """While entered, catches SIGNALS (but a SIGHUP this process was started ignoring: _left_ignored).

    Inside `training()` the first signal only sets `received`, which the training
    hook checks after each step to end the session cleanly (and save a checkpoint).
    Elsewhere, or at a second signal, Interrupted is raised at once (see _Catcher).

    Python runs a signal's handler in the main thread, between two of its bytecodes: not
    while that thread waits inside TensorFlow (a step's all-reduce, say). `delivered` is set
    at once, from another thread (the signal's wake-up byte), so that a peer watch knows the
    task was asked to stop even then. `agree(signum)` stops the run as a signal would, for a
    trainer that stops with the others of its cluster (hooks.stop.StopOnRequestHook); a signal
    of its own that comes next is its first, not a second.
    """

    def __init__(self):
        super().__init__()
        self.received = self.delivered = None
        self._training = False
        self._own = 0
        self._wakeup = None

    def __enter__(self):
        super().__enter__()
        self._watch_deliveries()
        return self

    def __exit__(self, exc_type, exc, traceback):
        if self._wakeup is not None:
            previous_fd, write_fd = self._wakeup
            signal.set_wakeup_fd(previous_fd)
            os.close(write_fd)  # the reader sees end-of-file and ends
            self._wakeup = None
        return super().__exit__(exc_type, exc, traceback)

    def _watch_deliveries(self):
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)
        self._wakeup = (signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False), write_fd)
        threading.Thread(target=self._read_deliveries, args=(read_fd,), daemon=True, name="stop-signals").start()

    def _read_deliveries(self, read_fd):
        with os.fdopen(read_fd, "rb", buffering=0) as wakeups:
            while True:
                data = wakeups.read(64)
                if not data:
                    return
                signum = next((n for n in data if n in self._previous), None)
                if signum is not None and self.delivered is None:
                    self.delivered = signal.Signals(signum)

    def _handle(self, signum, frame):
        if self._lost.take_resent():  # the stop that was raised and lost, not a second: raised again, but for a
            if not (self._training and self._own == 1):  # first one that training's hook now ends with a checkpoint
                self._raise(Interrupted(signum), frame)
            return
        self._own += 1
        self.delivered = self.delivered or signal.Signals(signum)
        agreed = self.received is not None  # the run stops already, with its cluster
        self.received = self.received or signum
        if self._own > 1 or not (self._training or agreed):
            self._raise(Interrupted(signum), frame)

    def agree(self, signum):
        """Stops the run as `signum` would, without a signal to this process (its cluster's trainers
        stop together after another's signal)."""
        self.received = self.received or signum

    def requested(self):
        """Returns True once a stop signal has arrived (or the stop was agreed)."""
        return self.received is not None

    def asked(self):
        """Returns the stop signal this task received or agreed to, even one whose handler has not
        run yet (the main thread waits inside TensorFlow), or None."""
        return self.received or self.delivered

    @contextlib.contextmanager
    def training(self):
        """Marks a block in which a first signal is left to the training hook (or a parameter server's watch)."""
        self._training = True
        try:
            yield
        finally:
            self._training = False


def _left_ignored(signum):
    """Returns whether `signum` is left as this process found it: a SIGHUP it ignores (`nohup`)."""
    return signum == signal.SIGHUP and signal.getsignal(signum) is signal.SIG_IGN


def _raise_instead(exc, interrupted):
    """Raises `interrupted` (the Interrupted a stop signal's handler raised) when another exception, `exc`,
    came out in its place: a handler runs between two bytecodes, and one inside Python code that
    TensorFlow's C++ called (graph building, model_to_estimator) turns into that code's own error
    (AttributeError, SystemError, AssertionError)."""
    if exc is not None and interrupted is not None and not isinstance(exc, Interrupted):
        raise interrupted from None


# The _LostStops whose stop is to be sent again, by one daemon thread. SimpleQueue.put neither blocks nor runs
# Python code: a signal's handler and the unraisable hook may call it. (A threading.Timer started in the hook
# waited there for its thread to start; on a loaded machine the 10 ms ran out first, the handler ran inside the
# hook, and Python printed that stop as "Exception ignored in sys.unraisablehook": lost again.)
_redeliveries = queue.SimpleQueue()
_redeliverer = None
_redeliverer_lock = threading.Lock()


def _redeliver():
    while True:
        lost = _redeliveries.get()
        time.sleep(_REDELIVERY_DELAY_S)
        lost.resend()


def _start_redeliverer():
    global _redeliverer
    with _redeliverer_lock:
        if _redeliverer is None or not _redeliverer.is_alive():  # (not in a forked child)
            _redeliverer = threading.Thread(target=_redeliver, daemon=True, name="stop-redelivery")
            _redeliverer.start()


class _LostStops:
    """A _Catcher's stop whose raise Python lost: its signal is sent again, a moment later and from another thread
    (sent from the hook, its handler would run inside the hook), while the _Catcher is still entered; one not
    sent by its exit is raised there (_Catcher.__exit__). `take_resent()` tells the handler it is the same stop."""

    def __init__(self):
        self._lock = threading.Lock()
        self._entered, self._lost, self._resent = True, None, False

    def lose(self, interrupted):
        with self._lock:
            self._lost = interrupted
        _redeliveries.put(self)

    def resend(self):
        with self._lock:
            if self._entered and self._lost is not None:
                self._resent = True
                os.kill(os.getpid(), self._lost.signum)
                self._lost = None

    def take_resent(self):
        with self._lock:
            resent, self._resent = self._resent, False
            return resent

    def close(self):
        """Ends the sending; returns the stop lost and not sent again yet, or None."""
        with self._lock:
            unsent, self._entered, self._lost = self._lost, False, None
            return unsent


class _RedeliveringHook:
    """sys.unraisablehook while a _Catcher is entered: a stop its handler raised is sent again (_LostStops),
    anything else is passed on."""

    def __init__(self, previous):
        self.previous = previous

    def __call__(self, unraisable):
        stop = unraisable.exc_value
        lost = getattr(stop, "lost_stops", None) if isinstance(stop, Interrupted) else None
        if lost is not None:
            lost.lose(stop)
        else:
            self.previous(unraisable)


def _inside_the_hook(frame):
    """Returns whether `frame` (where a signal's handler interrupted the main thread) runs inside _RedeliveringHook."""
    while frame is not None:
        if frame.f_code is _RedeliveringHook.__call__.__code__:
            return True
        frame = frame.f_back
    return False


class _AtOnce(_Catcher):
    def _handle(self, signum, frame):
        self._lost.take_resent()
        self._raise(Interrupted(signum), frame)


def stop_at_once():
    """Returns a context in which the stop signals raise Interrupted at once: a job's start-up (TensorFlow's import,
    before StopSignals takes over) or a tool's work (see _Catcher). A SIGINT this process was started ignoring is
    caught, as StopSignals catches it (a tool started with `&` from a script still stops on `kill -INT`); a
    SIGHUP stays ignored (_left_ignored)."""
    return _AtOnce()
