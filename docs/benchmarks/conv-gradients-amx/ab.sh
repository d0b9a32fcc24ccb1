#!/bin/bash
# One benchmark command in pairs of invocations, --conv-gradients onednn then matmul (the order swapped
# every other pair); prints each invocation's Estimator rows (precision, batch, images/sec over the timed span).
#   docs/benchmarks/conv-gradients-amx/ab.sh OUT PAIRS <scripts/benchmark.py flags>
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=$1 pairs=$2; shift 2
mkdir -p "$out"
for i in $(seq 1 "$pairs"); do
  order="onednn matmul"; [ $((i % 2)) = 0 ] && order="matmul onednn"
  for way in $order; do
    "${VENV:-.venv}/bin/python" scripts/benchmark.py "$@" --conv-gradients "$way" --output "$out/$way-$i" > "$out/$way-$i.log" 2>&1
    echo "$way-$i $("${VENV:-.venv}/bin/python" -c "import json; rows = json.load(open('$out/$way-$i/results.json'))['rows']
print([(r['precision'], r['global_batch_size'], r['conv_gradients'], round(r['images_per_sec_span'], 1)) for r in rows])")"
  done
done
