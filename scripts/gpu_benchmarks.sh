#!/usr/bin/env bash
# The GPU figures in one step: the training sweeps of both jobs over 1..N GPUs at fp32 and the
# mixed precisions these GPUs compute natively (bf16 where every GPU has compute capability 8.0 or
# more, fp16 from 7.0), every engine, with XLA off and on, and each engine's host work per step
# (--tiny-model); tables and plots go to docs/benchmarks/<job>-gpu-*/ and a summary naming the GPUs
# is appended to docs/benchmarks.md. Usage, on a machine with GPUs (the data dirs as train_*.py take them):
#   scripts/gpu_benchmarks.sh [--fashion-data DIR] [--oct-data DIR]   # measure
#   scripts/gpu_benchmarks.sh --dry-run                                # print each command, run nothing
#   GPU_BENCHMARKS_DEVICES="4 8.0 A100" scripts/gpu_benchmarks.sh --dry-run  # ... for GPUs not here
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
fashion_data=() oct_data=() dry_run=false
while [ $# -gt 0 ]; do
  case "$1" in
    --fashion-data) fashion_data=(--data-dir "$2"); shift 2 ;;
    --oct-data) oct_data=(--data-dir "$2"); shift 2 ;;
    --dry-run) dry_run=true; shift ;;
    *) echo "gpu_benchmarks.sh: error: unknown argument $1; use --fashion-data DIR, --oct-data DIR, --dry-run" >&2
       exit 2 ;;
  esac
done
# "<count> <lowest compute capability as major.minor> <names>" of the GPUs TensorFlow sees, unless given.
devices="${GPU_BENCHMARKS_DEVICES:-$(scripts/in_venv.sh python -c '
import tensorflow as tf
gpus = tf.config.list_physical_devices("GPU")
details = [tf.config.experimental.get_device_details(gpu) for gpu in gpus]
lowest = min((d.get("compute_capability", (0, 0)) for d in details), default=(0, 0))
print(len(gpus), "%d.%d" % tuple(lowest), ", ".join(sorted({d.get("device_name", "GPU") for d in details})))
' 2>/dev/null | tail -1)}"
read -r gpus capability names <<< "$devices"
if [ "${gpus:-0}" -lt 1 ]; then
  echo "gpu_benchmarks.sh: error: TensorFlow sees no GPU here; run it on a GPU machine (CPU figures: docs/benchmarks.md)" >&2
  exit 1
fi
major="${capability%%.*}"
precisions=fp32 mixed=()
[ "$major" -ge 8 ] && mixed+=(bf16)
[ "$major" -ge 7 ] && mixed+=(fp16)
for p in "${mixed[@]}"; do precisions="$precisions,$p"; done
xla_precisions="fp32${mixed[0]:+,${mixed[0]}}"
counts="$(seq -s, 1 "$gpus")"
stamp="$(date -u +%Y-%m-%d)"
run() {  # name, then benchmark.py flags
  local name="$1"; shift
  if $dry_run; then
    echo "python scripts/benchmark.py $* --output docs/benchmarks/$name"
    return
  fi
  scripts/in_venv.sh python scripts/benchmark.py "$@" --output "docs/benchmarks/$name"
  { echo; echo "### $name ($stamp; $gpus x $names, compute capability $capability)"; echo; echo '```sh'
    echo "scripts/benchmark.py $*"; echo '```'; echo; sed 1d "docs/benchmarks/$name/report.md"; } >> docs/benchmarks.md
}
echo "gpu_benchmarks.sh: $gpus x $names (compute capability $capability); sweeping 1..$gpus in $precisions" >&2
run fashion-gpu --task fashion --gpus "$counts" --batch-size 512 --precision "$precisions" "${fashion_data[@]}"
run fashion-gpu-xla --task fashion --gpus "$counts" --batch-size 512 --precision "$xla_precisions" --engines estimator --xla "${fashion_data[@]}"
run oct-gpu --task oct --gpus "$counts" --batch-size 64 --precision "$precisions" --weights none "${oct_data[@]}"
# Host work per step: a trivially small model's step in each engine against the limit's (docs/benchmarks.md).
run fashion-gpu-host-overhead --task fashion --gpus 1 --tiny-model --synthetic --data synthetic --batch-size 8,512 --precision fp32 --repeats 4 --timed-steps 40
run oct-gpu-xla --task oct --gpus "$counts" --batch-size 64 --precision "$xla_precisions" --engines estimator --xla --weights none "${oct_data[@]}"
$dry_run && exit 0
echo "gpu_benchmarks.sh: tables and plots in docs/benchmarks/*-gpu*/, summaries appended to docs/benchmarks.md" >&2
