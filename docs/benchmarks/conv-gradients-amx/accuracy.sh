#!/usr/bin/env bash
# The README's first command (the shipped Fashion sample, its recipe, --precision auto: bf16 on this CPU)
# with --deterministic --seed S, so that each seed's two runs share their split, input order and
# initial weights, once with --conv-gradients onednn and once with matmul; test accuracy and loss of the
# tested checkpoint of each, in OUT/accuracy.csv.
#   docs/benchmarks/conv-gradients-amx/accuracy.sh OUT [SEEDS]
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=$1 seeds=${2:-0 1 2 3 4}
mkdir -p "$out/runs"
echo "seed,conv_gradients,precision,eval_accuracy,eval_loss,train_images_per_sec" > "$out/accuracy.csv"
for seed in $seeds; do
  for way in onednn matmul; do
    dir="$out/runs/seed$seed-$way"
    "${VENV:-.venv}/bin/python" scripts/train_fashion.py --model-dir "$dir" --deterministic --seed "$seed" \
      --conv-gradients "$way" > "$dir.log" 2>&1 || { echo "failed: $dir (see $dir.log)" >&2; exit 1; }
    "${VENV:-.venv}/bin/python" -c "import json, sys; r = json.load(open(sys.argv[1]))
print(sys.argv[2], r['conv_gradients'], r['precision'], r['eval_accuracy'], round(r['eval_loss'], 4),
      r['train_images_per_sec'], sep=',')" "$dir/results.json" "$seed" >> "$out/accuracy.csv"
  done
done
cat "$out/accuracy.csv"
