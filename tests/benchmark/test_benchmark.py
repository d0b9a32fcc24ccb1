import csv
import json
import os

import pytest

from benchmark import report as benchmark_report
from benchmark.cli import main
from pipeline.machine import describe_cpu


def read_rows(out):
    with open(os.path.join(out, "results.csv")) as f:
        return list(csv.DictReader(f))


def test_a_tiny_training_sweep_writes_well_formed_outputs(fashion_data_dir, tmp_path, capsys):
    out = str(tmp_path / "bench")
    code = main(["--task", "fashion", "--cpu-replicas", "1,2", "--batch-size", "8", "--repeats", "2",
                 "--engines", "estimator,keras", "--warm-up-steps", "1", "--timed-steps", "2", "--output", out,
                 "--data-dir", fashion_data_dir])
    assert code == 0
    printed = capsys.readouterr().out
    assert printed.startswith("benchmark: fashion, training") and "[16/16]" in printed
    rows = read_rows(out)
    assert len(rows) == 16  # 2 engines x 2 data sources x 2 replica counts x 2 repeats
    assert {(r["engine"], r["data"], r["replicas"]) for r in rows} == {
        (e, d, r) for e in ("estimator", "keras") for d in ("real", "synthetic") for r in ("1", "2")}
    assert all(float(r["images_per_sec"]) > 0 and int(r["timed_steps"]) == 2 for r in rows)
    assert {r["global_batch_size"] for r in rows if r["replicas"] == "2"} == {"16"}
    assert all(r["scaling_efficiency"] for r in rows)
    assert len(json.loads((tmp_path / "bench" / "results.json").read_text())["rows"]) == 16
    report = (tmp_path / "bench" / "report.md").read_text()
    assert "| train | estimator | real | fp32 | 2 | 8 | 16 |" in report
    assert "Estimator / Keras fit, real data, fp32, 2 replica(s)" in report
    assert "real / synthetic data, Estimator, fp32, 1 replica(s)" in report
    assert describe_cpu() in printed.splitlines()[0]  # the CPU's model, cores and flags beside every figure
    # MFU beside every training figure: images/sec x the model's 16.4 MFLOP per training image / the peak.
    assert all(float(r["mfu"]) == pytest.approx(float(r["images_per_sec"]) * 16376064 / float(r["peak_flops"]))
               for r in rows)
    assert "| MFU |" in report and "measured fp32 peak" in report
    assert "**Caution:** a figure here times only 2 step(s) (--timed-steps)" in report
    for png in ("throughput.png", "mfu.png", "time.png"):
        assert (tmp_path / "bench" / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_input_only_compares_the_oct_pipelines_with_the_design_recipe(oct_tree, tmp_path):
    out = str(tmp_path / "bench")
    code = main(["--task", "oct", "--input-only", "--batch-size", "8", "--repeats", "1", "--warm-up-steps", "1",
                 "--timed-steps", "2", "--output", out, "--data-dir", os.path.dirname(oct_tree),
                 "--image-size", "32"])
    assert code == 0
    rows = read_rows(out)
    assert [r["data"] for r in rows] == ["pipeline", "pipeline-reduced", "pipeline-cached", "records", "design",
                                         "bare"]
    assert all(float(r["cpu_seconds_per_image"]) > 0 and r["mfu"] == "" for r in rows)  # no model: no MFU
    assert int(rows[2]["warm_up_steps"]) == 15  # the cached pipeline is timed after its first epoch (105 files)
    report = (tmp_path / "bench" / "report.md").read_text()
    assert "input 'records' / design recipe, batch 8" in report
    assert not (tmp_path / "bench" / "throughput.png").exists()
    assert (tmp_path / "bench" / "input.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_synthetic_rows_leave_out_the_decoding_and_cache_flags_the_real_rows_take(tmp_path, capsys):
    """The job refuses --decode reduced and --cache with --synthetic: a sweep of real and synthetic data
    with them stopped at its first synthetic row, after timing the real ones."""
    out = str(tmp_path / "bench")
    code = main(["--task", "oct", "--data", "synthetic", "--decode", "reduced", "--cache", "memory", "--image-size",
                 "32", "--weights", "none", "--engines", "estimator", "--batch-size", "8", "--repeats", "1",
                 "--warm-up-steps", "1", "--timed-steps", "2", "--precision", "fp32", "--output", out])
    assert code == 0, capsys.readouterr().err[-2000:]
    (row,) = read_rows(out)
    assert row["data"] == "synthetic" and float(row["images_per_sec"]) > 0


@pytest.mark.parametrize("strategy", ["mirrored", "central_storage"])
def test_the_reference_engines_and_precisions_write_well_formed_rows_and_ratios(tmp_path, capsys, strategy):
    out = str(tmp_path / "bench")
    code = main(["--task", "fashion", "--synthetic", "--cpu-replicas", "2", "--batch-size", "8", "--repeats", "1",
                 "--data", "synthetic", "--precision", "fp32,bf16", "--warm-up-steps", "1", "--timed-steps", "2",
                 "--strategy", strategy, "--output", out])
    assert code == 0, capsys.readouterr().err[-2000:]
    rows = read_rows(out)
    assert {(r["engine"], r["precision"]) for r in rows} == {
        (e, p) for e in ("estimator", "keras", "custom_loop", "limit") for p in ("fp32", "bf16")}
    assert all(float(r["images_per_sec"]) > 0 and int(r["timed_steps"]) == 2 and r["global_batch_size"] == "16"
               for r in rows)
    # The span (between steps included) is never shorter than the steps' own windows.
    assert all(0 < float(r["images_per_sec_span"]) <= 1.01 * float(r["images_per_sec"]) for r in rows)
    assert all(r["devices"] == "/cpu:0 /cpu:1" for r in rows)
    report = (tmp_path / "bench" / "report.md").read_text()
    for reference in ("Keras fit", "custom loop", "limit"):
        assert f"Estimator / {reference}, synthetic data, bf16, 2 replica(s)" in report
    assert "bf16 / fp32, estimator, synthetic data, 2 replica(s)" in report
    assert "custom loop / limit, synthetic data, fp32, 2 replica(s)" in report
    assert "| keras | synthetic | bf16 | 2 | 8 |" in report  # its time per step beyond the limit's
    assert strategy in report.splitlines()[0]


def test_bad_sweep_flags_are_refused(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--task", "fashion", "--batch-size", "0,8"])
    assert exit_info.value.code == 2
    assert "expected numbers greater than 0" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(["--task", "fashion", "--input-only", "--tiny-model"])
    assert exit_info.value.code == 2
    assert "--input-only measures no model" in capsys.readouterr().err
    # Flags that would have been ignored, or swept twice, are refused too.
    for argv, message in ((["--variants", "design"], "give --input-only too"),
                          (["--input-only", "--engines", "keras"], "--input-only trains no model"),
                          (["--input-only", "--data", "real"], "argument --data: --input-only trains no model"),
                          (["--cpu-replicas", "1,2,1"], "1 given more than once"),
                          (["--precision", "fp32,bf16,fp32"], "fp32 given more than once"),
                          (["--tflite", "int8"], "argument --tflite: --tflite acts after training"),
                          (["--mixup", "0.2"], "argument --mixup: --mixup is the run loop's"),
                          (["--target-accuracy", "0.5", "--validation-fraction", "0.1", "--tta", "flip"],
                           "argument --tta: --tta acts after training")):
        with pytest.raises(SystemExit) as exit_info:
            main(["--task", "fashion", *argv])
        assert exit_info.value.code == 2
        assert message in capsys.readouterr().err, argv


def test_an_output_it_could_not_write_or_would_overwrite_is_refused_before_any_measurement(tmp_path, capsys):
    """A sweep that ran for hours then failed to write its outputs lost them all; one into an earlier
    benchmark's folder overwrote its results and left its plots beside the new report."""
    (tmp_path / "file").write_text("")
    (tmp_path / "earlier").mkdir()
    (tmp_path / "earlier" / "results.json").write_text("{}")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "report.md").write_text("mine")
    cases = [(tmp_path / "file", 2, "is a file; pass a folder"),
             (tmp_path / "earlier", 2, "holds a results.json (an earlier benchmark's, or another's), which "
                                       "would be overwritten; pass another --output"),
             (tmp_path / "mine", 2, "holds a report.md (an earlier benchmark's, or another's), which would be "
                                    "overwritten"),
             (tmp_path / "file" / "under", 1, "cannot write the outputs to --output")]
    for folder, code, fragment in cases:
        with pytest.raises(SystemExit) as exit_info:  # the sweep would take minutes: it never starts
            main(["--task", "fashion", "--synthetic", "--repeats", "1", "--output", str(folder)])
        assert exit_info.value.code == code
        assert fragment in capsys.readouterr().err.strip().splitlines()[-1]
    assert (tmp_path / "earlier" / "results.json").read_text() == "{}"
    assert os.listdir(tmp_path / "mine") == ["report.md"]
    # A folder it can write is tried and left for the outputs to make: a sweep failing on its data left it empty.
    from benchmark.cli import build_benchmark_parser, parse_args
    parse_args(build_benchmark_parser(), ["--task", "fashion", "--synthetic", "--output", str(tmp_path / "new" / "o")])
    assert not (tmp_path / "new").exists()


def test_scaling_efficiency_and_ratios_come_from_the_same_run():
    def row(engine, data, replicas, rate, precision="fp32"):
        return {"mode": "train", "engine": engine, "data": data, "precision": precision, "replicas": replicas,
                "per_replica_batch_size": 32, "global_batch_size": 32 * replicas, "images_per_sec": rate,
                "cpu_seconds_per_image": 0.001, "epoch_seconds": 10.0}
    rows = [row("estimator", "real", 1, 100.0), row("estimator", "real", 1, 300.0),
            row("estimator", "real", 2, 300.0), row("keras", "real", 2, 250.0),
            row("estimator", "synthetic", 2, 400.0), row("limit", "real", 2, 320.0),
            row("estimator", "real", 2, 540.0, "bf16")]
    benchmark_report.add_scaling_efficiency(rows)
    assert rows[2]["scaling_efficiency"] == pytest.approx(300 / (2 * 200))
    assert rows[3]["scaling_efficiency"] is None  # no 1-replica Keras run to compare with
    found = {label: ratio for label, ratio, *_ in benchmark_report.ratios(benchmark_report.summarize(rows))}
    assert found["Estimator / Keras fit, real data, fp32, 2 replica(s), batch 32/replica"] == pytest.approx(1.2)
    assert found["Estimator / limit, real data, fp32, 2 replica(s), batch 32/replica"] == pytest.approx(300 / 320)
    assert found["real / synthetic data, Estimator, fp32, 2 replica(s), batch 32/replica"] == pytest.approx(0.75)
    assert found["bf16 / fp32, estimator, real data, 2 replica(s), batch 32/replica"] == pytest.approx(1.8)
    assert "Estimator / limit, real data, bf16, 2 replica(s), batch 32/replica" not in found  # no bf16 limit run


def test_a_report_cautions_against_figures_of_few_timed_steps_only_when_some_are():
    def rows(*timed_steps):
        return [{"mode": "train", "engine": "estimator", "data": "real", "precision": "fp32", "replicas": 1,
                 "per_replica_batch_size": 32, "global_batch_size": 32, "images_per_sec": 100.0 + i,
                 "cpu_seconds_per_image": 0.001, "epoch_seconds": 10.0, "timed_steps": steps}
                for i, steps in enumerate(timed_steps)]

    def report(found):
        return benchmark_report.markdown_report(benchmark_report.summarize(found), "h", found)
    assert "Caution" not in report(rows(20, 10))
    assert "times only 1 step(s)" in report(rows(20, 1))


def test_the_limit_runs_the_asked_steps_in_one_call_and_the_tiny_model_keeps_the_jobs_input():
    import tensorflow as tf
    from benchmark.custom_loop import _train_loop
    from benchmark.tiny_model import TinyModelTask
    from pipeline.tasks.registry import TASKS, build_parser

    task = TinyModelTask(TASKS["fashion"])
    model = task.build_model(build_parser(TASKS["fashion"]).parse_args(["--synthetic"]), 1e-3)
    assert task.name == "fashion-tiny" and model.input_names == ["image"] and model.count_params() == 7850
    features = tf.random.stateless_uniform((4, 28, 28, 1), seed=(1, 2))
    labels = tf.one_hot([0, 1, 2, 3], 10)
    loop = _train_loop(model, tf.distribute.get_strategy(), 4)
    first = float(loop(features, labels, tf.constant(1)))
    last = float(loop(features, labels, tf.constant(5)))
    assert int(model.optimizer.iterations) == 6  # 1 + 5 steps, in two calls
    assert last < first  # the same batch, trained on again: its loss falls


def test_each_engines_time_per_step_beyond_the_limits_comes_from_its_mean_rate():
    def summary(engine, rate, batch=8):
        return {"mode": "train", "engine": engine, "data": "synthetic", "precision": "fp32", "replicas": 1,
                "per_replica_batch_size": batch, "global_batch_size": batch, "images_per_sec": rate,
                "cpu_ms_per_image": 8000 / rate}
    spanned = dict(summary("estimator", 900.0), images_per_sec_span=800.0)  # the span's rate is used
    found = benchmark_report.step_overheads([spanned, summary("keras", 400.0),
                                             summary("limit", 1000.0), summary("keras", 100.0, batch=16)])
    assert [(o["engine"], round(o["step_ms"], 3), round(o["overhead_ms"], 3), o["fraction_of_limit"])
            for o in found] == [("estimator", 10.0, 2.0, 0.8), ("keras", 20.0, 12.0, 0.4)]  # no batch-16 limit
    assert [o["cpu_overhead_ms"] for o in found] == pytest.approx([(8000 / 900 - 8) * 8, (20 - 8) * 8])
    labels = [label for label, *_ in benchmark_report.ratios([summary("keras", 400.0), summary("limit", 1000.0)])]
    assert labels == ["Keras fit / limit, synthetic data, fp32, 1 replica(s), batch 8/replica"]


def test_the_engines_of_one_setting_take_turns_going_first():
    from benchmark.sweep import plan_configs, repeat_order
    configs = plan_configs(["estimator", "keras", "limit"], ["synthetic"], [1], [64, 512])
    orders = [[(c.engine, c.batch_size) for c in repeat_order(configs, repeat)] for repeat in range(4)]
    assert orders[0] == [("estimator", 64), ("keras", 64), ("limit", 64),
                         ("estimator", 512), ("keras", 512), ("limit", 512)]
    assert orders[1] == [("keras", 64), ("limit", 64), ("estimator", 64),
                         ("keras", 512), ("limit", 512), ("estimator", 512)]
    assert orders[3] == orders[0]
    assert sorted(orders[2]) == sorted(orders[0])  # every configuration once per repeat


def test_engines_are_compared_repeat_by_repeat_with_an_interval_of_the_median():
    def row(engine, repeat, span):
        return {"mode": "train", "engine": engine, "data": "synthetic", "precision": "fp32", "replicas": 1,
                "per_replica_batch_size": 64, "global_batch_size": 64, "repeat": repeat,
                "images_per_sec": 1000.0, "images_per_sec_span": span, "cpu_seconds_per_image": 0.001,
                "epoch_seconds": None}
    # Keras drifts with the machine; the Estimator is 2% ahead of it within every repeat.
    keras_spans = [900.0, 1200.0, 1000.0, 800.0, 1100.0]
    rows = ([row("keras", i, span) for i, span in enumerate(keras_spans)]
            + [row("estimator", i, 1.02 * span) for i, span in enumerate(keras_spans)])
    assert benchmark_report.paired_ratios(rows, ("train", "estimator", "synthetic", "fp32", 1, 64),
                                          ("train", "keras", "synthetic", "fp32", 1, 64)) == pytest.approx([1.02] * 5)
    (label, _, _, paired), = benchmark_report.ratios(benchmark_report.summarize(rows), rows)
    assert label.startswith("Estimator / Keras fit")
    assert paired[:3] == pytest.approx((1.02, 1.02, 1.02)) and paired[3:] == (5, 5)
    median, low, high = benchmark_report.median_interval([0.9, 1.0, 1.1, 1.2, 0.95, 1.05])
    assert low < median < high and 0.9 <= low and high <= 1.2
    assert benchmark_report.median_interval([0.9, 1.0, 1.1, 1.2, 0.95, 1.05]) == (median, low, high)


def test_the_fashion_input_variants_fall_back_to_the_shipped_sample_offline(tmp_path):
    # The 'design' variant read the full dataset's IDX files straight from --data-dir: offline, the benchmark
    # measured 'pipeline' (on the sample) and then stopped on a missing file.
    import subprocess
    import sys
    from tests.conftest import ROOT
    offline = {"HTTPS_PROXY": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9"}  # refused at once
    result = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "benchmark.py"), "--task", "fashion",
                             "--input-only", "--variants", "pipeline,design", "--batch-size", "32", "--repeats", "1",
                             "--warm-up-steps", "1", "--timed-steps", "2", "--output", str(tmp_path / "out")],
                            env=dict(os.environ, HOME=str(tmp_path), **offline), capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    with open(tmp_path / "out" / "results.csv") as f:
        assert sorted(row["data"] for row in csv.DictReader(f)) == ["design", "pipeline"]


def test_a_sweep_stopped_midway_keeps_the_measurements_it_made(tmp_path, capsys):
    from benchmark.cli import _kept_if_stopped
    from pipeline.signals import Interrupted
    rows = [{"task": "fashion", "engine": "estimator", "images_per_sec": 100.0}]
    with pytest.raises(Interrupted):
        with _kept_if_stopped(rows, 6, str(tmp_path), "fashion, training", benchmark_report.write_tables,
                              benchmark_report.COLUMNS):
            raise Interrupted(15)
    written = json.loads((tmp_path / "results.json").read_text())
    assert written["rows"] == rows and written["header"].endswith("; STOPPED after 1 of 6 measurements")
    assert next(csv.DictReader(open(tmp_path / "results.csv")))["images_per_sec"] == "100.0"
    assert "the 1 of 6 measurements made are in" in capsys.readouterr().err
    with pytest.raises(KeyboardInterrupt):  # none made: nothing written
        with _kept_if_stopped([], 6, str(tmp_path / "none"), "h", benchmark_report.write_tables, ()):
            raise KeyboardInterrupt
    assert not (tmp_path / "none").exists()


def test_a_stop_that_came_out_as_another_error_keeps_the_measurements_made(tmp_path):
    """A SIGTERM while Keras traced its step came out of model.fit as a StagingError: the rows were lost."""
    import os
    import signal
    from benchmark.cli import _kept_if_stopped
    from pipeline.signals import Interrupted
    rows = [{"task": "fashion", "engine": "keras", "images_per_sec": 100.0}]
    with pytest.raises(Interrupted) as raised:
        with _kept_if_stopped(rows, 6, str(tmp_path), "fashion, training", benchmark_report.write_tables,
                              benchmark_report.COLUMNS):
            try:  # as Python code TensorFlow called: what was raised inside comes out as its own error
                os.kill(os.getpid(), signal.SIGTERM)
            except Interrupted:
                raise SystemError("returned a result with an exception set") from None
    assert raised.value.signum == signal.SIGTERM
    assert json.loads((tmp_path / "results.json").read_text())["rows"] == rows
