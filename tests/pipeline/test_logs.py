"""The run's log lines: on stderr as it is when each is written."""
import io
import logging
import sys

from pipeline.logs import configure_logging


def test_log_lines_go_to_the_current_stderr_even_after_an_earlier_one_was_closed(monkeypatch):
    # As pytest's capture does between two in-process runs: the first run's stderr is closed after it.
    first, second = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stderr", first)
    configure_logging()
    logging.getLogger("pipeline.test").info("first run")
    first.close()
    monkeypatch.setattr(sys, "stderr", second)
    configure_logging()
    logging.getLogger("pipeline.test").info("second run")
    assert second.getvalue().endswith(" I second run\n") and "Logging error" not in second.getvalue()
