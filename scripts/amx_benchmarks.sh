#!/usr/bin/env bash
# Issue 34's measurements on a CPU with AMX in one step: the peak probe, the oneDNN kernels of a
# step (which run on avx512_core_amx, which fall back, the reorders), the Estimator against Keras
# `fit` and the limit in fp32, bf16 and bf16-amp with paired repeats, and the levers (batch size,
# threads, XLA, TF_SET_ONEDNN_FPMATH_MODE, --conv-gradients onednn against matmul). Each measurement is one
# benchmark invocation; its tables go to docs/benchmarks/amx-*/ and its command, headed by the CPU and its
# flags, is appended to docs/benchmarks.md with a link to them. Run it on a quiet machine (about an hour
# on 2 cores of a Xeon with AMX):
#   scripts/amx_benchmarks.sh                      # measure
#   scripts/amx_benchmarks.sh --only NAME[,NAME]   # only these measurements (amx-peak, amx-engines-oct64, ...)
#   scripts/amx_benchmarks.sh --dry-run            # print each command, run nothing
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
dry_run=false
only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry_run=true; shift ;;
    --only) [ $# -ge 2 ] || { echo "amx_benchmarks.sh: error: --only needs names, e.g. --only amx-peak" >&2; exit 2; }
            only=",$2,"; shift 2 ;;
    *) echo "amx_benchmarks.sh: error: unknown argument $1; use --dry-run, --only NAMES or nothing" >&2; exit 2 ;;
  esac
done
matched=","  # the measurements --only named that exist
skipped() {  # name: whether --only leaves it out
  [ -n "$only" ] && [[ "$only" != *",$1,"* ]] && return 0
  matched="$matched$1,"
  return 1
}
cpuinfo="${AMX_BENCHMARKS_CPUINFO:-/proc/cpuinfo}"  # another file in tests only
if ! grep -qsw amx_bf16 "$cpuinfo"; then
  echo "amx_benchmarks.sh: error: this CPU has no amx_bf16 ($(grep -s -m1 'model name' "$cpuinfo" | cut -d: -f2 | xargs));" \
       "run it on an Intel Xeon with AMX (figures for other CPUs: docs/benchmarks.md)" >&2
  exit 1
fi
stamp="$(date -u +%Y-%m-%d)"
cpu="$(grep -m1 'model name' "$cpuinfo" | cut -d: -f2 | xargs), $(nproc) cores, $(grep -m1 '^flags' "$cpuinfo" |
  tr ' ' '\n' | grep -xE 'avx512f|avx512_bf16|avx512_fp16|amx_tile|amx_bf16' | xargs)"
synthetic=(--synthetic --data synthetic --cpu-replicas 1)
vgg64=(--image-size 64 --weights none)

phase=check  # first every selected measurement's outputs are checked to be new, then each is run
recorded=""  # the first selected measurement whose output exists
note_existing() {  # name
  local found
  for found in "docs/benchmarks/$1" "docs/benchmarks/$1.txt"; do
    if [ -e "$found" ] && [ -z "$recorded" ]; then
      recorded="$found:$1"
    fi
  done
}

run() {  # name, then the command after `scripts/in_venv.sh`; its output folder is docs/benchmarks/<name>
  local name="$1"; shift
  local out="docs/benchmarks/$name"
  if skipped "$name"; then
    return
  fi
  if [ "$phase" = check ]; then
    $dry_run || note_existing "$name"
    return
  fi
  if $dry_run; then
    echo "$* --output $out"
    return
  fi
  scripts/in_venv.sh "$@" --output "$out"
  local summary="report.md"
  [ -f "$out/kernels.md" ] && summary="kernels.md"
  { echo; echo "#### $name ($stamp; $cpu)"; echo; echo '```sh'; echo "$* --output $out"; echo '```'; echo;
    echo "Tables: [\`$name/$summary\`](benchmarks/$name/$summary)."; } >> docs/benchmarks.md
}

run_plain() {  # name, then a command that prints its figures; kept in docs/benchmarks/<name>.txt
  local name="$1"; shift
  if skipped "$name"; then
    return
  fi
  if [ "$phase" = check ]; then
    $dry_run || note_existing "$name"
    return
  fi
  if $dry_run; then
    echo "$*"
    return
  fi
  scripts/in_venv.sh "$@" | tee "docs/benchmarks/$name.txt"
  { echo; echo "#### $name ($stamp; $cpu)"; echo; echo '```sh'; echo "$*"; echo '```'; echo;
    echo "Output: [\`$name.txt\`](benchmarks/$name.txt)."; } >> docs/benchmarks.md
}

measurements() {
# The peak every MFU is read against (the cache keeps the highest).
run_plain amx-peak python scripts/probe_peak.py --precision fp32,bf16
# Item 1: the kernels of a step, each against the peak of the type it computes in.
run amx-kernels-fashion python scripts/profile_kernels.py --task fashion "${synthetic[@]}" --batch-size 64,512 \
  --engines estimator,keras,limit --precision fp32,bf16,bf16-amp --repeats 1 --timed-steps 10
run amx-kernels-oct64 python scripts/profile_kernels.py --task oct "${synthetic[@]}" "${vgg64[@]}" --batch-size 64 \
  --engines estimator,keras --precision fp32,bf16,bf16-amp --repeats 1 --warm-up-steps 3 --timed-steps 4
# Items 3 and 4: the engines paired over repeats, the MFU of each row (the Estimator's weight gradients as
# --conv-gradients auto computes them; the Fashion CNN's once more with oneDNN's, to compare).
run amx-engines-fashion python scripts/benchmark.py --task fashion "${synthetic[@]}" --batch-size 64,512 \
  --engines estimator,keras,limit --precision fp32,bf16,bf16-amp --repeats 7 --timed-steps 40
run amx-engines-fashion-onednn python scripts/benchmark.py --task fashion "${synthetic[@]}" --batch-size 64,512 \
  --engines estimator,keras,limit --precision fp32,bf16,bf16-amp --repeats 7 --timed-steps 40 --conv-gradients onednn
run amx-engines-oct64 python scripts/benchmark.py --task oct "${synthetic[@]}" "${vgg64[@]}" --batch-size 64 \
  --engines estimator,keras,limit --precision fp32,bf16,bf16-amp --repeats 5 --warm-up-steps 5 --timed-steps 10
# Item 2, the levers one at a time: batch size (the limit shows what the model alone could reach) ...
run amx-batch-fashion python scripts/benchmark.py --task fashion "${synthetic[@]}" --batch-size 128,256,1024,2048 \
  --engines estimator,limit --precision bf16,bf16-amp --repeats 3 --timed-steps 30
run amx-batch-oct64 python scripts/benchmark.py --task oct "${synthetic[@]}" "${vgg64[@]}" --batch-size 32,128 \
  --engines estimator,limit --precision bf16,bf16-amp --repeats 3 --warm-up-steps 5 --timed-steps 10
# ... fp32 math on AMX (the convolutions forward and backward-data; weight gradients stay fp32) ...
run amx-kernels-fpmath-fashion env TF_SET_ONEDNN_FPMATH_MODE=BF16 python scripts/profile_kernels.py \
  --task fashion "${synthetic[@]}" --batch-size 512 --engines estimator --precision fp32 --repeats 1 --timed-steps 10
run amx-fpmath-fashion env TF_SET_ONEDNN_FPMATH_MODE=BF16 python scripts/benchmark.py --task fashion "${synthetic[@]}" \
  --batch-size 64,512 --engines estimator --precision fp32 --repeats 3 --timed-steps 30
run amx-fpmath-oct64 env TF_SET_ONEDNN_FPMATH_MODE=BF16 python scripts/benchmark.py --task oct "${synthetic[@]}" "${vgg64[@]}" \
  --batch-size 64 --engines estimator --precision fp32 --repeats 3 --warm-up-steps 5 --timed-steps 10
# ... XLA and threads (each the same sweep as amx-engines-*'s Estimator rows, to compare with them) ...
run amx-xla-fashion python scripts/benchmark.py --task fashion "${synthetic[@]}" --xla --batch-size 64,512 --engines estimator \
  --precision fp32,bf16 --repeats 3 --timed-steps 30
for threads in "1 2" "2 1" "2 2"; do
  set -- $threads
  run "amx-threads-$1-$2-fashion" python scripts/benchmark.py --task fashion "${synthetic[@]}" --intra-op-threads "$1" \
    --inter-op-threads "$2" --batch-size 512 --engines estimator --precision bf16,bf16-amp --repeats 3 --timed-steps 30
done
# ... and the weight gradients as one matmul each: alone (ms per layer shape, oneDNN's kernel and the matmul,
# the input gradient too), then in training (--conv-gradients onednn against matmul, invocations in turns).
run_plain amx-conv-gradients-alone env PYTHONPATH=. python docs/benchmarks/conv-gradients-amx/measure.py
run_plain amx-conv-gradients-oct64 docs/benchmarks/conv-gradients-amx/ab.sh docs/benchmarks/amx-conv-gradients-oct64 3 \
  --task oct "${synthetic[@]}" "${vgg64[@]}" --batch-size 64 --engines estimator --precision bf16,bf16-amp --repeats 2 \
  --warm-up-steps 5 --timed-steps 10
run_plain amx-conv-gradients-fashion docs/benchmarks/conv-gradients-amx/ab.sh docs/benchmarks/amx-conv-gradients-fashion 3 \
  --task fashion "${synthetic[@]}" --batch-size 64,512 --engines estimator --precision bf16,bf16-amp --repeats 2 \
  --timed-steps 30
}

measurements
for name in ${only//,/ }; do
  if [[ "$matched" != *",$name,"* ]]; then
    echo "amx_benchmarks.sh: error: --only $name: no such measurement; the names are the docs/benchmarks/amx-*" \
         "outputs the commands write (--dry-run lists them)" >&2
    exit 2
  fi
done
if [ -n "$recorded" ]; then
  echo "amx_benchmarks.sh: error: ${recorded%:*} holds a recorded measurement; move it away, or leave" \
       "${recorded##*:} out with --only (nothing was run)" >&2
  exit 1
fi
phase=run
echo "amx_benchmarks.sh: $cpu" >&2
measurements
if ! $dry_run; then
  echo "amx_benchmarks.sh: tables in docs/benchmarks/amx-*/, summaries appended to docs/benchmarks.md" >&2
fi
