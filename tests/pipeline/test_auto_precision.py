"""--precision auto: bf16 where the CPU computes it natively (AMX or AVX512_BF16), fp32 elsewhere; the
header and results.json say what was picked and why."""
import json
import os

import pytest

from pipeline.flags import build_parser
from pipeline.machine import auto_precision
from pipeline.roles import run
from pipeline.tasks.fashion import TASK
from tests.conftest import write_cpuinfo


@pytest.mark.parametrize("flags, expected", [("avx512f amx_tile amx_bf16 avx512_bf16", "bf16"),
                                             ("avx512f avx512_bf16", "bf16"),
                                             ("avx512f avx512_vnni", "fp32"), ("", "fp32")])
def test_auto_picks_bf16_only_where_the_cpu_computes_it_natively(tmp_path, flags, expected):
    picked, why = auto_precision(uses_gpus=False, cpuinfo=write_cpuinfo(tmp_path, flags))
    assert picked == expected
    assert ("amx_bf16" in why) == ("amx_bf16" in flags) and ("neither" in why) == (expected == "fp32")


def this_cpus_flags():
    with open("/proc/cpuinfo") as f:
        line = next(line for line in f if line.startswith("flags"))
    return set(line.split(":", 1)[1].split())


def test_a_run_with_auto_records_what_it_picked_and_why(tmp_path, capsys):
    expected = "bf16" if this_cpus_flags() & {"amx_bf16", "avx512_bf16"} else "fp32"
    model_dir = str(tmp_path / "run")
    results = run(TASK, build_parser(TASK).parse_args(["--synthetic", "--max-steps", "2", "--batch-size", "8",
                                                       "--precision", "auto", "--model-dir", model_dir]))
    written = json.load(open(os.path.join(model_dir, "results.json")))
    assert written["precision"] == results["precision"] == expected
    assert written["precision_requested"] == "auto" and written["precision_reason"]
    header = next(line for line in capsys.readouterr().out.splitlines() if line.strip().startswith("precision:"))
    assert f"picked by --precision auto: {written['precision_reason']}" in header and expected in header


def test_auto_is_the_default():
    assert build_parser(TASK).parse_args([]).precision == "auto"


def test_an_explicit_precision_is_recorded_as_asked(tmp_path):
    model_dir = str(tmp_path / "run")
    run(TASK, build_parser(TASK).parse_args(["--synthetic", "--max-steps", "1", "--batch-size", "8",
                                             "--precision", "fp32", "--model-dir", model_dir]))
    written = json.load(open(os.path.join(model_dir, "results.json")))
    assert written["precision"] == written["precision_requested"] == "fp32" and written["precision_reason"] is None


def settings_of_flags(*argv):
    from pipeline.settings import Settings
    return Settings.from_args(build_parser(TASK).parse_args(["--synthetic", *argv]))


CPUS = {"avx512_bf16": "avx512f avx512_vnni avx512_bf16", "amx": "avx512f avx512_bf16 amx_tile amx_bf16",
        "avx2 only": "avx2 fma"}


def on_cpu(monkeypatch, name):
    """Makes pipeline.machine read the flags of CPUS[name] (model 'Test CPU')."""
    from pipeline import machine
    monkeypatch.setattr(machine, "_cpuinfo", lambda path="/proc/cpuinfo": ("Test CPU", set(CPUS[name].split())))
    return set(CPUS[name].split())


@pytest.mark.parametrize("cpu", sorted(CPUS))
@pytest.mark.parametrize("precision", ["bf16", "bf16-amp"])
def test_bfloat16_in_a_cluster_on_cpus_is_refused_and_auto_picks_fp32_there(monkeypatch, precision, cpu):
    """TF 2.15's distributed runtime has no bfloat16 ReLU on CPUs: both ways failed at the first step.
    Without AVX-512 the rewrite (bf16-amp) is refused first, for its own reason, anywhere."""
    from pipeline.errors import FlagError
    from pipeline.machine import resolved_precision
    flags = on_cpu(monkeypatch, cpu)
    rewrite_refused = precision == "bf16-amp" and "avx512f" not in flags
    reason = "this CPU has no AVX-512" if rewrite_refused else "a cluster on CPUs .* use --precision fp32"
    with pytest.raises(FlagError, match=f"--precision {precision}: {reason}"):
        resolved_precision(settings_of_flags("--precision", precision), in_cluster=True)
    if rewrite_refused:
        with pytest.raises(FlagError, match="this CPU has no AVX-512"):
            resolved_precision(settings_of_flags("--precision", precision))  # one machine
    else:
        assert resolved_precision(settings_of_flags("--precision", precision)).precision == precision
    picked = resolved_precision(settings_of_flags("--precision", "auto"), in_cluster=True)
    assert picked.precision == "fp32" and picked.precision_requested == "auto"
    assert ("a cluster on CPUs" in picked.precision_reason) == bool(flags & {"amx_bf16", "avx512_bf16"})


@pytest.mark.parametrize("cpu", sorted(CPUS))
def test_the_bf16_policy_with_tflite_is_refused_and_auto_picks_fp32_for_it(monkeypatch, cpu):
    """TFLite has no bfloat16 tensors: the converter failed on the bf16 export; bf16-amp's export is float32."""
    from pipeline.errors import FlagError
    from pipeline.machine import resolved_precision
    flags = on_cpu(monkeypatch, cpu)
    with pytest.raises(FlagError, match="--precision bf16: --tflite converts the export, and TFLite has no bfloat16"):
        resolved_precision(settings_of_flags("--precision", "bf16", "--tflite", "float32"))
    if "avx512f" in flags:
        assert resolved_precision(settings_of_flags("--precision", "bf16-amp", "--tflite", "int8")).precision == \
            "bf16-amp"
    picked = resolved_precision(settings_of_flags("--precision", "auto", "--tflite", "float32"))
    assert picked.precision == "fp32" and ("--tflite" in picked.precision_reason) == bool(
        flags & {"amx_bf16", "avx512_bf16"})


@pytest.mark.parametrize("strategy, in_cluster", [("central_storage", False), ("parameter_server", True)])
def test_fp16_under_a_strategy_keras_s_loss_scaling_refuses_is_one_line(strategy, in_cluster):
    """Keras's LossScaleOptimizer runs under the mirrored strategies and one device only: the others failed at the
    first graph build ("Mixed precision is not supported with the tf.distribute.Strategy")."""
    from pipeline.errors import FlagError
    from pipeline.machine import resolved_precision
    with pytest.raises(FlagError, match=f"--precision fp16 --strategy {strategy}: Keras's loss scaling"):
        resolved_precision(settings_of_flags("--precision", "fp16", "--strategy", strategy), in_cluster=in_cluster)
    for other in ("mirrored", "multi_worker_mirrored"):
        assert resolved_precision(settings_of_flags("--precision", "fp16", "--strategy", other),
                                  in_cluster=other != "mirrored").precision == "fp16"
