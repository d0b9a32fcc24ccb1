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


class StopSignals:
    """While entered, catches SIGNALS (but a SIGHUP this process was started ignoring: _left_ignored).

    Inside `training()` the first signal only sets `received`, which the training
    hook checks after each step to end the session cleanly (and save a checkpoint).
    Elsewhere, or at a second signal, Interrupted is raised at once.

    Python runs a signal's handler in the main thread, between two of its bytecodes: not
    while that thread waits inside TensorFlow (a step's all-reduce, say). `delivered` is set
    at once, from another thread (the signal's wake-up byte), so that a peer watch knows the
    task was asked to stop even then. `agree(signum)` stops the run as a signal would, for a
    trainer that stops with the others of its cluster (hooks.stop.StopOnRequestHook); a signal
    of its own that comes next is its first, not a second.
    """

    def __init__(self):
        self.received = self.delivered = None
        self._training = False
        self._own = 0
        self._previous = {}
        self._wakeup = None
        self._raised = None  # the Interrupted a handler raised
        self._redelivery = None

    def __enter__(self):
        for signum in SIGNALS:
            if not _left_ignored(signum):
                self._previous[signum] = signal.signal(signum, self._handle)
        self._watch_deliveries()
        self._redelivery = _redelivering()
        self._redelivery.__enter__()
        return self

    def __exit__(self, exc_type, exc, traceback):
        self._redelivery.__exit__(None, None, None)
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        if self._wakeup is not None:
            previous_fd, write_fd = self._wakeup
            signal.set_wakeup_fd(previous_fd)
            os.close(write_fd)  # the reader sees end-of-file and ends
            self._wakeup = None
        _raise_instead(exc, self._raised)
        return False

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
        self._own += 1
        self.delivered = self.delivered or signal.Signals(signum)
        agreed = self.received is not None  # the run stops already, with its cluster
        self.received = self.received or signum
        if self._own > 1 or not (self._training or agreed):
            self._raised = Interrupted(signum)
            _raise_stop(self._raised, frame)

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


# Stop signals to send again (see _redelivering), sent by one daemon thread. SimpleQueue.put neither blocks nor
# runs Python code: a signal handler and the unraisable hook may call it. (A threading.Timer started in the hook
# waited there for its thread to start; on a loaded machine the 10 ms ran out first, the handler ran inside the
# hook, and Python printed that stop as "Exception ignored in sys.unraisablehook": lost again.)
_redeliveries = queue.SimpleQueue()
_redeliverer = None
_redeliverer_lock = threading.Lock()


def _redeliver():
    while True:
        signum = _redeliveries.get()
        time.sleep(_REDELIVERY_DELAY_S)
        os.kill(os.getpid(), signum)


def _start_redeliverer():
    global _redeliverer
    with _redeliverer_lock:
        if _redeliverer is None or not _redeliverer.is_alive():  # (not in a forked child)
            _redeliverer = threading.Thread(target=_redeliver, daemon=True, name="stop-redelivery")
            _redeliverer.start()


class _RedeliveringHook:
    """sys.unraisablehook while _redelivering: a stop is queued to be sent again, anything else is passed on."""

    def __init__(self, previous):
        self.previous = previous

    def __call__(self, unraisable):
        stop = unraisable.exc_value
        if isinstance(stop, (Interrupted, KeyboardInterrupt)):
            _redeliveries.put(getattr(stop, "signum", signal.SIGINT))
        else:
            self.previous(unraisable)


def _inside_the_hook(frame):
    """Returns whether `frame` (where a signal's handler interrupted the main thread) runs inside _RedeliveringHook."""
    while frame is not None:
        if frame.f_code is _RedeliveringHook.__call__.__code__:
            return True
        frame = frame.f_back
    return False


def _raise_stop(interrupted, frame):
    """Raises `interrupted` from a stop signal's handler that interrupted `frame`; inside the unraisable hook, where
    Python would only print it, the signal is sent again instead, to come out once the hook has returned."""
    if _inside_the_hook(frame):
        _redeliveries.put(interrupted.signum)
        return
    raise interrupted


@contextlib.contextmanager
def _redelivering():
    """While entered, a stop that a handler raised where Python cannot raise is signalled again, to come out
    where the main thread is next. A handler runs between any two bytecodes of the main thread, those of a
    weakref callback or a `__del__` that the garbage collector ran among them; Python only prints what
    those raise ("Exception ignored in"), and the stop was lost. The signal is sent again from another thread,
    a moment later; should its handler still run inside the hook, it sends it again rather than raise there
    (_raise_stop)."""
    _start_redeliverer()
    previous = sys.unraisablehook
    sys.unraisablehook = _RedeliveringHook(previous)
    try:
        yield
    finally:
        sys.unraisablehook = previous


@contextlib.contextmanager
def stop_at_once():
    """While entered, the stop signals raise Interrupted at once: a job's start-up (TensorFlow's import, before
    StopSignals takes over) or a tool's work. A SIGINT this process was started ignoring is caught, as
    StopSignals catches it (a tool started with `&` from a script still stops on `kill -INT`); a SIGHUP
    stays ignored (_left_ignored)."""
    raised, previous = [], {}

    def handle(signum, frame):
        raised.append(Interrupted(signum))
        _raise_stop(raised[-1], frame)
    for signum in SIGNALS:
        if not _left_ignored(signum):
            previous[signum] = signal.signal(signum, handle)
    try:
        with _redelivering():
            yield
    except BaseException as e:
        _raise_instead(e, raised[0] if raised else None)
        raise
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
