"""A SessionRunHook that tells a person where a run stands: step N of M, loss, speed and an ETA."""
import datetime
import logging
import time


from hooks.stepping import StepCountingHook

log = logging.getLogger(__name__)


def format_duration(seconds):
    """Returns `seconds` as a short duration: '45s', '12m05s', '3h07m'."""
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def ending(now, seconds):
    """Returns ', ending about <time>' for a run that ends `seconds` after the datetime `now`: the time
    of day within a day, else the date and time; '' beyond the calendar (year 9999)."""
    try:
        ends = now + datetime.timedelta(seconds=seconds)
    except OverflowError:
        return ""
    return f", ending about {ends.strftime('%H:%M' if seconds < 86400 else '%Y-%m-%d %H:%M')}"


class ProgressHook(StepCountingHook):
    """Every `every_n_steps` global steps (and at the final one) logs

        step 200/2600 (7.7%): loss 0.5123, 1506.2 images/sec, ETA 26m34s

    The loss is the Estimator's (from the LOSSES collection) at that step; the
    rate is wall-clock over the window, everything included (checkpoints,
    summaries), so the ETA, the steps left at that rate, is what a person will
    wait. The run's first step (graph set-up) is left out of the first window.
    After the first window it also logs once how long the rest is expected to
    take and when it should end.
    """

    def __init__(self, max_steps, global_batch_size, every_n_steps=100, clock=time.monotonic,
                 now=datetime.datetime.now):
        super().__init__()
        self.max_steps, self.global_batch_size, self.every_n_steps = max_steps, global_batch_size, every_n_steps
        self._clock, self._now = clock, now
        self._loss, self._mark = None, None
        self.lines = []  # every progress line logged, for tests and callers

    def begin(self):
        super().begin()
        self._loss = self.training_loss()

    def _reports_at(self, step):
        return step % self.every_n_steps == 0 or step >= self.max_steps

    def before_run(self, run_context):
        # Under parameter servers the next global step is not known in advance: the loss always comes.
        wanted = self._loss is not None and (self.asynchronous or self._reports_at(self.global_step + 1))
        return self.step_args(self._loss if wanted else None)

    def after_run(self, run_context, run_values):
        previous = self.global_step
        loss = self.count_step(run_values)
        now = self._clock()
        if self._mark is None:  # the run's first step: the start of the first window
            self._mark = (self.global_step, now)
            return
        # A multiple of every_n_steps reached or passed (other workers advance it too, asynchronously).
        if not (self.global_step // self.every_n_steps > previous // self.every_n_steps
                or self.global_step >= self.max_steps):
            return
        steps, seconds = self.global_step - self._mark[0], now - self._mark[1]
        first_window = len(self.lines) == 0
        self._mark = (self.global_step, now)
        if steps <= 0 or seconds <= 0:
            return
        left = max(0, self.max_steps - self.global_step) * seconds / steps
        loss = f"loss {loss:.4f}, " if loss is not None else ""
        line = (f"step {self.global_step}/{self.max_steps} ({100.0 * self.global_step / self.max_steps:.1f}%): "
                f"{loss}{steps * self.global_batch_size / seconds:.1f} images/sec, ETA {format_duration(left)}")
        self.lines.append(line)
        log.info(line)
        if first_window and self.global_step < self.max_steps:
            log.info("expected: about %s for the %d steps left%s", format_duration(left),
                     self.max_steps - self.global_step, ending(self._now(), left))
