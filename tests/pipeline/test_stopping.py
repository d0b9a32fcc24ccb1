"""The stop signals' handling: a first signal while training only asks for the stop, a stop agreed with
the cluster's other trainers counts as one without being the task's first signal, and a delivered
signal is known at once, even while the main thread waits inside a C call where no Python handler runs."""
import hashlib
import os
import signal
import threading
import time

import pytest

from pipeline.signals import Interrupted, StopSignals


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


def test_a_signal_the_run_was_started_ignoring_stays_ignored():
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
