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
    for png in ("throughput.png", "time.png"):
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
    assert all(float(r["cpu_seconds_per_image"]) > 0 for r in rows)
    assert int(rows[2]["warm_up_steps"]) == 15  # the cached pipeline is timed after its first epoch (105 files)
    report = (tmp_path / "bench" / "report.md").read_text()
    assert "input 'records' / design recipe, batch 8" in report
    assert not (tmp_path / "bench" / "throughput.png").exists()
    assert (tmp_path / "bench" / "input.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


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
    assert all(r["devices"] == "/cpu:0 /cpu:1" for r in rows)
    report = (tmp_path / "bench" / "report.md").read_text()
    for reference in ("Keras fit", "custom loop", "limit"):
        assert f"Estimator / {reference}, synthetic data, bf16, 2 replica(s)" in report
    assert "bf16 / fp32, estimator, synthetic data, 2 replica(s)" in report
    assert strategy in report.splitlines()[0]


def test_bad_sweep_flags_are_refused(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--task", "fashion", "--batch-size", "0,8"])
    assert exit_info.value.code == 2
    assert "expected numbers greater than 0" in capsys.readouterr().err


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
    found = {label: ratio for label, ratio, _ in benchmark_report.ratios(benchmark_report.summarize(rows))}
    assert found["Estimator / Keras fit, real data, fp32, 2 replica(s), batch 32/replica"] == pytest.approx(1.2)
    assert found["Estimator / limit, real data, fp32, 2 replica(s), batch 32/replica"] == pytest.approx(300 / 320)
    assert found["real / synthetic data, Estimator, fp32, 2 replica(s), batch 32/replica"] == pytest.approx(0.75)
    assert found["bf16 / fp32, estimator, real data, 2 replica(s), batch 32/replica"] == pytest.approx(1.8)
    assert "Estimator / limit, real data, bf16, 2 replica(s), batch 32/replica" not in found  # no bf16 limit run
