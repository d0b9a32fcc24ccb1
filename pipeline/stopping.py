"""Stop signals: SIGINT (Ctrl-C) and SIGTERM (Kubernetes, Slurm, preemptible VMs) end a
training run at the next step with a checkpoint, then exit 130 or 143."""
import contextlib
import signal

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(Exception):
    """The run was stopped by `signum`; `saved_at_step` is the global step of the checkpoint
    written on the way out, or None when the stop came outside training."""

    def __init__(self, signum, saved_at_step=None):
        self.signum, self.saved_at_step = signum, saved_at_step
        self.name = signal.Signals(signum).name
        super().__init__(f"stopped by {self.name}")

    @property
    def exit_code(self):
        """128 + the signal number, as a shell reports a process ended by it (130, 143)."""
        return 128 + self.signum


class StopSignals:
    """While entered, catches SIGINT and SIGTERM.

    Inside `training()` the first signal only sets `received`, which the training
    hook checks after each step to end the session cleanly (and save a checkpoint).
    Elsewhere, or at a second signal, Interrupted is raised at once.
    """

    def __init__(self):
        self.received = None
        self._training = False
        self._previous = {}

    def __enter__(self):
        for signum in SIGNALS:
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc):
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        return False

    def _handle(self, signum, frame):
        first = self.received is None
        self.received = self.received or signum
        if not (self._training and first):
            raise Interrupted(signum)

    def requested(self):
        """Returns True once a stop signal has arrived."""
        return self.received is not None

    @contextlib.contextmanager
    def training(self):
        """Marks a block in which a first signal is left to the training hook."""
        self._training = True
        try:
            yield
        finally:
            self._training = False
