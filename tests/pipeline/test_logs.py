"""The run's log lines: on stderr as it is when each is written."""
import io
import logging
import sys

import pytest

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


def test_a_reader_that_stops_during_a_finished_run_s_summary_is_a_warning_not_an_error(monkeypatch, caplog):
    """`train_fashion.py | head -17`: the run had trained, reported and written results.json, then ended in
    'error: stopped', exit 1."""
    from pipeline import run_output
    silenced = []
    monkeypatch.setattr(run_output, "silence_stdout", lambda: silenced.append(True))
    with run_output.reader_may_leave("/runs/m/results.json"):
        raise BrokenPipeError(32, "Broken pipe")
    assert silenced == [True]
    assert "closed it before the summary was printed; the run finished, and /runs/m/results.json holds its " \
           "results" in caplog.text
    with pytest.raises(OSError):  # any other failure is the run's
        with run_output.reader_may_leave("/runs/m/results.json"):
            raise OSError(28, "No space left on device")


def test_the_summary_times_only_the_validations_this_run_made(capsys):
    from pipeline import run_output
    results = {"task": "images", "global_step": 40, "train_images_per_sec": None, "eval_accuracy": 0.9,
               "eval_loss": 0.3, "eval_examples": 20, "eval_step": 30, "evaluations": [{"step": 20}, {"step": 30}],
               "validation_examples": 8, "stopped_because": "max_steps", "validation_seconds": 2.5,
               "best": {"validation_accuracy": 0.75, "step": 30}}
    run_output.print_summary(results, "/m/results.json")
    assert "best accuracy 0.7500 at step 30 of 2 evaluations on 8 images (2.5 s); stopped" in capsys.readouterr().out
    run_output.print_summary(dict(results, validation_seconds=0.0), "/m/results.json")  # only the report written
    assert "of 2 evaluations on 8 images; stopped: max_steps" in capsys.readouterr().out
    run_output.print_summary(dict(results, start_global_step=20), "/m/results.json")  # resumed after the first
    assert "of 2 evaluations on 8 images (2.5 s in this run); stopped" in capsys.readouterr().out
