#!/usr/bin/env bash
# OCT sample (make_oct_sample.py: 105 training scans, 10 of them validation, 24 test), the images job's
# small_resnet at 128 px in gray with the small-data recipe, 60 epochs; seeds 0-4, fp32 and bf16 in turns,
# --deterministic so each seed's pair shares its split, input order and augmentation draws.
# Usage: DATA=<make_oct_sample.py --out folder> [SEEDS='0 1 2 3 4'] accuracy.sh OUT_DIR
set -euo pipefail
out=$1
mkdir -p "$out/runs"
[ -e "$out/accuracy.csv" ] || echo "seed,precision,eval_accuracy,eval_loss,train_images_per_sec" > "$out/accuracy.csv"
for seed in ${SEEDS:-0 1 2 3 4}; do
  for p in fp32 bf16; do
    dir="$out/runs/seed$seed-$p"
    .venv/bin/python scripts/train_images.py --data-dir "${DATA:?set DATA to a make_oct_sample.py --out folder}/OCT2017" \
      --model-dir "$dir" --seed "$seed" --deterministic --precision "$p" --model small_resnet --image-size 128 --channels 1 \
      --batch-size 16 --epochs 60 --augment flip,rotate=15,zoom=0.1,translate=0.1 --lr-schedule cosine \
      --bootstrap-resamples 200 > "$dir.log" 2>&1 || { echo "failed $dir"; exit 1; }
    python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(sys.argv[2], sys.argv[3], r['eval_accuracy'], round(r['eval_loss'], 4), round(r['train_images_per_sec'], 1), sep=',')" "$dir/results.json" "$seed" "$p" >> "$out/accuracy.csv"
  done
done
