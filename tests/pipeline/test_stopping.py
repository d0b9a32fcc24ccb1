"""The stop signals' handling: a first signal while training only asks for the stop, a stop agreed with
the cluster's other trainers counts as one without being the task's first signal, and a delivered
signal is known at once, even while the main thread waits inside a C call where no Python handler runs."""
import hashlib
import os
import signal
import sys
import threading
import time
import weakref

import pytest

from pipeline import signals
from pipeline.signals import Interrupted, StopSignals, stop_at_once


@pytest.fixture(autouse=True)
def default_dispositions():
    """Each test starts with the stop signals as a process starts: StopSignals leaves an ignored one
    alone, and a test worker's may have been left otherwise."""
    defaults = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL, signal.SIGHUP: signal.SIG_DFL}
    previous = {signum: signal.signal(signum, handler) for signum, handler in defaults.items()}
    yield
    for signum, handler in previous.items():
        signal.signal(signum, handler)


def test_a_first_signal_while_training_asks_for_the_stop_and_a_second_ends_at_once():
    with StopSignals() as stop, stop.training():
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.requested() and stop.received == signal.SIGTERM
        with pytest.raises(Interrupted):
            os.kill(os.getpid(), signal.SIGTERM)


def test_a_closed_terminal_s_sighup_asks_for_the_stop_as_sigterm_does():
    with StopSignals() as stop, stop.training():
        os.kill(os.getpid(), signal.SIGHUP)
        assert stop.requested() and stop.received == signal.SIGHUP
        with pytest.raises(Interrupted) as raised:
            os.kill(os.getpid(), signal.SIGHUP)
    assert raised.value.exit_code == 129


def test_a_sighup_the_run_was_started_ignoring_stays_ignored():
    """`nohup` starts the run with SIGHUP ignored, so that it outlives the terminal: it must not stop."""
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with StopSignals() as stop, stop.training():
            os.kill(os.getpid(), signal.SIGHUP)
            time.sleep(0.1)
            assert not stop.requested() and stop.asked() is None
            os.kill(os.getpid(), signal.SIGTERM)  # the others are still caught
            assert stop.received == signal.SIGTERM
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, previous)


def test_an_ignored_sigint_is_still_a_stop():
    """A shell script's `&` starts its jobs ignoring SIGINT (the CI's own runs among them): a `kill -INT`
    to the run still means stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with StopSignals() as stop, stop.training():
        os.kill(os.getpid(), signal.SIGINT)
        assert stop.received == signal.SIGINT


def test_after_an_agreed_stop_the_tasks_own_signal_is_its_first_even_after_training():
    with StopSignals() as stop:
        with stop.training():
            stop.agree(signal.SIGTERM)
            assert stop.requested() and stop.received == signal.SIGTERM
        os.kill(os.getpid(), signal.SIGTERM)  # the launcher's, late: the run ends by the agreed stop already
        assert stop.received == signal.SIGTERM
        with pytest.raises(Interrupted):
            os.kill(os.getpid(), signal.SIGINT)


def test_a_signal_is_known_as_delivered_while_the_main_thread_is_inside_a_c_call():
    seen = {}

    def signal_and_look():
        time.sleep(0.2)
        os.kill(os.getpid(), signal.SIGTERM)
        deadline = time.monotonic() + 5
        while stop.asked() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        seen.update(asked=stop.asked(), received=stop.received)

    with StopSignals() as stop, stop.training():
        looker = threading.Thread(target=signal_and_look)
        looker.start()
        # Seconds inside OpenSSL without the GIL, as a step inside TensorFlow: the handler waits.
        hashlib.pbkdf2_hmac("sha256", b"password", b"salt", 3_000_000)
        looker.join()
        assert stop.received == signal.SIGTERM  # the handler ran once the call returned
    assert seen == {"asked": signal.SIGTERM, "received": None}


def test_before_training_the_stop_signals_stop_at_once():
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        with pytest.raises(Interrupted) as raised:
            with stop_at_once():
                os.kill(os.getpid(), signum)
                time.sleep(1)  # (the handler runs at once: never reached)
        assert raised.value.signum == signum


class _Collected:
    """An object whose weakref callback is sent a stop signal: the handler runs inside the callback, as it
    does when the garbage collector runs one between two bytecodes of the main thread."""


def _stop_inside_a_weakref_callback(signum):
    dropped = _Collected()
    ref = weakref.ref(dropped, lambda ref: os.kill(os.getpid(), signum))
    del dropped  # the callback runs here; what its handler raises, Python only prints
    return ref


@pytest.mark.parametrize("context", [stop_at_once, StopSignals])
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_stop_raised_inside_a_weakref_callback_comes_out_after_it(context, signum):
    """A SIGALRM test of the class-folder scan saw its stop printed as "Exception ignored in" and the
    scan go on to the end."""
    with pytest.raises(Interrupted) as raised:
        with context():
            _stop_inside_a_weakref_callback(signum)
            time.sleep(5)  # (the stop comes again 10 ms later: never reached)
    assert raised.value.signum == signum


@pytest.mark.parametrize("context", [stop_at_once, StopSignals])
def test_a_stop_sent_again_before_the_hook_has_returned_still_comes_out(context, monkeypatch):
    """On a loaded machine the stop sent again 10 ms later came while the main thread was still inside the
    unraisable hook (a Timer's start waits there for its thread): Python printed it as "Exception ignored in
    sys.unraisablehook" and the stop was lost for good (1 stop in 300 with two busy loops beside). Sent again at
    once, it comes inside the hook every time."""
    monkeypatch.setattr(signals, "_REDELIVERY_DELAY_S", 0.0)
    with pytest.raises(Interrupted) as raised:
        with context():
            _stop_inside_a_weakref_callback(signal.SIGTERM)
            time.sleep(5)  # (never reached)
    assert raised.value.signum == signal.SIGTERM


def test_a_second_signal_in_training_raised_inside_a_weakref_callback_comes_out_after_it():
    with StopSignals() as stop, stop.training():  # a first signal in training is left to the hook
        _stop_inside_a_weakref_callback(signal.SIGTERM)
        assert stop.received == signal.SIGTERM
        with pytest.raises(Interrupted):
            _stop_inside_a_weakref_callback(signal.SIGINT)
            time.sleep(5)  # (the stop comes again 10 ms later: never reached)


def _recording(signum):
    """Sets a handler that records `signum`'s arrivals; returns the list."""
    arrived = []
    signal.signal(signum, lambda n, frame: arrived.append(n))
    return arrived


@pytest.mark.parametrize("context", [stop_at_once, StopSignals])
def test_a_lost_stop_not_sent_again_by_the_exit_is_raised_there_and_never_sent_after(context, monkeypatch):
    """Sent 10 ms later whatever came first, it reached the handler restored after the block: Python's default
    ended the process (no line, no flush), or an ignored SIGINT lost it."""
    monkeypatch.setattr(signals, "_REDELIVERY_DELAY_S", 0.2)
    with pytest.raises(Interrupted) as raised:
        with context():
            _stop_inside_a_weakref_callback(signal.SIGTERM)
    assert raised.value.signum == signal.SIGTERM
    arrived = _recording(signal.SIGTERM)
    time.sleep(0.5)
    assert arrived == []


@pytest.mark.parametrize("context", [stop_at_once, StopSignals])
def test_a_lost_stop_that_came_out_as_another_error_is_not_sent_again(context, monkeypatch):
    """It came out in the other error's place, then was sent again and stopped the handling of that stop
    (benchmark.py's writing of the rows it measured)."""
    monkeypatch.setattr(signals, "_REDELIVERY_DELAY_S", 0.2)
    with pytest.raises(Interrupted):
        with context():
            _stop_inside_a_weakref_callback(signal.SIGTERM)
            raise RuntimeError("an error of TensorFlow's, in the stop's place")
    arrived = _recording(signal.SIGTERM)
    time.sleep(0.5)
    assert arrived == []


def test_a_first_stop_lost_before_training_is_left_to_training_s_hook_when_it_comes_again():
    """Sent again once training had begun, it counted as a second signal and ended the run with no checkpoint."""
    with StopSignals() as stop:
        _stop_inside_a_weakref_callback(signal.SIGTERM)
        with stop.training():
            time.sleep(0.3)  # (it comes again here, 10 ms later)
            assert stop.requested() and stop.received == signal.SIGTERM
        with pytest.raises(Interrupted):  # a second signal ends it at once
            os.kill(os.getpid(), signal.SIGINT)


def test_other_unraisable_errors_are_still_printed():
    seen = []
    previous, sys.unraisablehook = sys.unraisablehook, seen.append
    try:
        with stop_at_once(), StopSignals():
            dropped = _Collected()
            ref = weakref.ref(dropped, lambda ref: 1 / 0)
            del dropped
    finally:
        sys.unraisablehook = previous
    assert [type(u.exc_value) for u in seen] == [ZeroDivisionError] and ref() is None


def test_a_tool_started_ignoring_sigint_stops_on_it_and_leaves_it_ignored():
    """A tool started with `&` from a shell script (SIGINT ignored) went on after `kill -INT`."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with pytest.raises(Interrupted) as raised:
        with stop_at_once():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)  # (never reached)
    assert raised.value.signum == signal.SIGINT and raised.value.exit_code == 130
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN


def converted(exception):
    """Runs as Python code TensorFlow's C++ called back does: an exception raised inside it comes out as
    that code's own error."""
    try:
        os.kill(os.getpid(), signal.SIGTERM)
    except Interrupted:
        raise exception from None


@pytest.mark.parametrize("exception", [AttributeError("'Operation' object has no attribute 'keys'"),
                                       SystemError("returned a result with an exception set"), AssertionError()])
def test_a_stop_that_comes_out_as_another_error_is_the_stop(exception):
    """Signals in graph building ended in these, exit 1 with a traceback."""
    for context in (stop_at_once, StopSignals):
        with pytest.raises(Interrupted) as raised:
            with context():
                converted(exception)
        assert raised.value.signum == signal.SIGTERM
    with pytest.raises(type(exception)):  # an error of its own, with no signal, stays itself
        with stop_at_once(), StopSignals():
            raise exception


@pytest.mark.parametrize("left, removed", [
    ([".run.lock"], True),
    ([".run.lock", ".warm_start.lock", "keras/keras_model.ckpt.index"], True),  # a stop in graph building
    ([".run.lock", "keras/keras_model.ckpt.index", "model.ckpt-0.index"], False),
    ([".run.lock", "notes.txt"], False),
])
def test_a_failed_run_removes_the_model_dir_it_made_when_only_locks_and_first_weights_are_left(tmp_path, left,
                                                                                                 removed):
    from pipeline.model_dir import removed_if_left_empty
    model_dir = tmp_path / "made" / "model"
    for name in left:
        (model_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (model_dir / name).write_bytes(b"")
    with pytest.raises(Interrupted):
        with removed_if_left_empty(str(model_dir), str(tmp_path / "made")):
            raise Interrupted(signal.SIGTERM)
    assert os.path.exists(tmp_path / "made") != removed
    assert os.path.exists(model_dir / left[-1]) != removed


def test_a_model_dir_whose_first_weights_another_process_is_writing_is_kept(tmp_path):
    """A cluster's worker writes the first weights under the warm-start lock: a failing chief leaves them."""
    import subprocess
    import sys
    from pipeline.model_dir import removed_if_left_empty
    model_dir = tmp_path / "model"
    (model_dir / "keras").mkdir(parents=True)
    (model_dir / ".run.lock").write_bytes(b"")
    (model_dir / ".warm_start.lock").write_bytes(b"")
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR); "
                               "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)",
                               str(model_dir / ".warm_start.lock")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(Interrupted):
            with removed_if_left_empty(str(model_dir), str(model_dir)):
                raise Interrupted(signal.SIGTERM)
        assert (model_dir / "keras").is_dir()
    finally:
        holder.kill()
        holder.wait()
