#!/usr/bin/env bash
# The Fashion sample (800 train / 200 test, make_fashion_sample.py's split, seed 0) trained with and
# without --mixup 0.2, paired by seed (the same weights' initialisation and input order per seed),
# the sample recipe's batch 32, 20 epochs, rate 1e-3 unscaled; the last checkpoint tested.
# Usage: docs/benchmarks/mixup-fashion-sample-cpu/compare.sh OUT_DIR  (from the repo root)
set -euo pipefail
out=${1:?usage: compare.sh OUT_DIR}
mkdir -p "$out"
[ -f "$out/data/train-images-idx3-ubyte.gz" ] || scripts/in_venv.sh python scripts/make_fashion_sample.py --out "$out/data" >/dev/null
echo "seed,mixup,eval_accuracy,eval_loss,train_seconds" > "$out/results.csv"
for seed in 1 2 3 4 5; do
  for mixup in 0 0.2; do
    dir="$out/runs/seed$seed-mixup$mixup"
    scripts/in_venv.sh python scripts/train_fashion.py --data-dir "$out/data" --model-dir "$dir" \
      --batch-size 32 --epochs 20 --learning-rate 1e-3 --lr-scaling none --validation-fraction 0 \
      --deterministic --seed "$seed" --mixup "$mixup" --bootstrap-resamples 100 --log-steps 1000 >/dev/null 2>&1
    scripts/in_venv.sh python -c "import json,sys; r=json.load(open(sys.argv[1])); print(','.join(str(x) for x in (sys.argv[2], sys.argv[3], r['eval_accuracy'], round(r['eval_loss'], 4), r['train_seconds'])))" \
      "$dir/results.json" "$seed" "$mixup" >> "$out/results.csv"
  done
done
cat "$out/results.csv"
