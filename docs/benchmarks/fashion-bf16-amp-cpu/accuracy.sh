#!/usr/bin/env bash
# Fashion sample, its recipe and default validation split, seeds 0-4, fp32 / bf16 / bf16-amp; test accuracy of the best checkpoint.
set -euo pipefail
out=$1
echo "seed,precision,eval_accuracy,eval_loss" > "$out/accuracy.csv"
for seed in 0 1 2 3 4; do
  for p in fp32 bf16 bf16-amp; do
    dir="$out/runs/seed$seed-$p"
    .venv/bin/python scripts/train_fashion.py --data-dir "${DATA:?set DATA to a make_fashion_sample.py --out folder}" --model-dir "$dir" --seed "$seed" --precision "$p" \
      --batch-size 32 --epochs 20 --learning-rate 1e-3 --lr-scaling none --bootstrap-resamples 200 > "$dir.log" 2>&1 || { mkdir -p "$(dirname "$dir")"; echo "failed $dir"; exit 1; }
    python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(sys.argv[2], sys.argv[3], r['eval_accuracy'], round(r['eval_loss'], 4), sep=',')" "$dir/results.json" "$seed" "$p" >> "$out/accuracy.csv"
  done
done
