"""MFU: read against the peak, in the run's header, end line and results; one warning above 1."""
import json
import logging
import os

import pytest

from pipeline import mfu as mfu_lib, peak as peak_lib
from pipeline.peak import Peak


def test_mfu_is_model_flops_per_second_over_the_peak_and_unknown_without_either(caplog):
    peak = Peak(2e11, "measured fp32 peak of a CPU")
    with caplog.at_level(logging.WARNING):
        assert mfu_lib.mfu(1000.0, 1e8, peak) == 0.5
        assert mfu_lib.mfu(None, 1e8, peak) is None and mfu_lib.mfu(1000.0, 1e8, Peak(None, "unknown")) is None
    assert not caplog.records


def test_an_mfu_above_one_logs_one_warning_naming_the_count_and_the_peak(caplog):
    with caplog.at_level(logging.WARNING):
        assert mfu_lib.mfu(3000.0, 1e8, Peak(2e11, "measured fp32 peak of a CPU")) == 1.5
    [record] = caplog.records
    assert "MFU 1.50 is above 1" in record.message and "100 MFLOP per training image" in record.message
    assert "200 GFLOP/s (measured fp32 peak of a CPU)" in record.message


def test_a_run_whose_throughput_beats_an_injected_peak_warns_and_records_it(fashion_data_dir, tmp_path, monkeypatch,
                                                                          caplog, capsys):
    from pipeline.flags import build_parser
    from pipeline.machine import read_cpuinfo
    from pipeline.roles import run
    from pipeline.tasks.fashion import TASK
    cache = tmp_path / "peak.json"
    name = peak_lib.cpu_identity(read_cpuinfo())
    cache.write_text(json.dumps({peak_lib.machine_key(name, os.cpu_count()): {
        "fp32": {"flops": 1e6, "shape": "injected", "probed_at": "now"}}}))
    monkeypatch.setenv(peak_lib.PEAK_CACHE_ENV, str(cache))
    args = build_parser(TASK).parse_args(["--data-dir", fashion_data_dir, "--model-dir", str(tmp_path / "model"),
                                          "--batch-size", "16", "--max-steps", "4", "--warm-up-steps", "1",
                                          "--precision", "fp32"])  # the peak injected is fp32's
    with caplog.at_level(logging.WARNING):
        results = run(TASK, args)
    training = 3 * 5588480 - 2 * 26 * 26 * 32 * 9  # no input gradients for the first convolution
    assert results["model_flops_per_image"] == {"forward": 5588480, "training": training}
    assert results["peak_flops"]["flops"] == 1e6 and "measured fp32 peak" in results["peak_flops"]["source"]
    expected = results["train_images_per_sec"] * training / 1e6
    assert results["mfu"] == pytest.approx(expected) and expected > 1
    assert [r.message for r in caplog.records if "is above 1" in r.message][0].startswith(f"MFU {expected:.2f}")
    printed = capsys.readouterr().out
    assert "model FLOPs:   5.59 MFLOP per image forward, 16.4 MFLOP training (2.93 x forward)" in printed
    assert "peak:          1 MFLOP/s, the measured fp32 peak" in printed and f"MFU {expected:.2f} of" in printed

