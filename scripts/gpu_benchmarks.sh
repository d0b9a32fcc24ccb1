#!/usr/bin/env bash
# The GPU figures in one step: the training sweeps of both jobs over 1..N GPUs at fp32 and the
# mixed precisions (bf16 from compute capability 8.0, fp16 from 7.0), every engine, with XLA
# off and on, and each engine's host work per step (--tiny-model); tables and plots go to
# docs/benchmarks/<job>-gpu-*/ and a summary is appended to
# docs/benchmarks.md. Usage, on a machine with GPUs (the data dirs as train_*.py take them):
#   scripts/gpu_benchmarks.sh [--fashion-data DIR] [--oct-data DIR]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
fashion_data=() oct_data=()
while [ $# -gt 0 ]; do
  case "$1" in
    --fashion-data) fashion_data=(--data-dir "$2"); shift 2 ;;
    --oct-data) oct_data=(--data-dir "$2"); shift 2 ;;
    *) echo "gpu_benchmarks.sh: error: unknown argument $1; use --fashion-data DIR, --oct-data DIR" >&2; exit 2 ;;
  esac
done
gpus="$(scripts/in_venv.sh python -c 'import tensorflow as tf; print(len(tf.config.list_physical_devices("GPU")))' 2>/dev/null | tail -1)"
if [ "${gpus:-0}" -lt 1 ]; then
  echo "gpu_benchmarks.sh: error: TensorFlow sees no GPU here; run it on a GPU machine (CPU figures: docs/benchmarks.md)" >&2
  exit 1
fi
counts="$(seq -s, 1 "$gpus")"
stamp="$(date -u +%Y-%m-%d)"
run() {  # name, then benchmark.py flags
  local name="$1"; shift
  scripts/in_venv.sh python scripts/benchmark.py "$@" --output "docs/benchmarks/$name"
  { echo; echo "### $name ($stamp)"; echo; echo '```sh'; echo "scripts/benchmark.py $*"; echo '```'; echo;
    sed 1d "docs/benchmarks/$name/report.md"; } >> docs/benchmarks.md
}
echo "gpu_benchmarks.sh: $gpus GPU(s); sweeping 1..$gpus" >&2
run fashion-gpu --task fashion --gpus "$counts" --batch-size 512 --precision fp32,bf16,fp16 "${fashion_data[@]}"
run fashion-gpu-xla --task fashion --gpus "$counts" --batch-size 512 --precision fp32,bf16 --engines estimator --xla "${fashion_data[@]}"
run oct-gpu --task oct --gpus "$counts" --batch-size 64 --precision fp32,bf16,fp16 --weights none "${oct_data[@]}"
# Host work per step: a trivially small model's step in each engine against the limit's (docs/benchmarks.md).
run fashion-gpu-host-overhead --task fashion --gpus 1 --tiny-model --synthetic --data synthetic --batch-size 8,512 --precision fp32 --repeats 4 --timed-steps 40
run oct-gpu-xla --task oct --gpus "$counts" --batch-size 64 --precision fp32,bf16 --engines estimator --xla --weights none "${oct_data[@]}"
echo "gpu_benchmarks.sh: tables and plots in docs/benchmarks/*-gpu*/, summaries appended to docs/benchmarks.md" >&2
