#!/usr/bin/env bash
# From-scratch networks of the images job on small, hard generated datasets (issue 33, part 7):
# small_cnn (the old default), small_resnet (the new one) and keras_scratch (Keras's "image
# classification from scratch" network at its own widths), paired by seed: with --deterministic the
# same seed gives every model the same split, input order and augmentation draws.
# Data (tests/images_data.make_textured_shapes_folder): 3 classes x 200 images of striped shapes on
# striped backgrounds with distractor lines and noise (std 20), random place and scale, 32-96 px wide, PNG;
# 'colour' trained at 40 px, 'gray' (mode L, another data seed) at 32 px; 480 train / 120 test each.
# Recipe, the same for every model: batch 32, 20 epochs (EPOCHS), Adam 1e-3 with cosine decay after the
# default warm-up, --augment flip,rotate=15,zoom=0.1,translate=0.1, no validation split; the last
# checkpoint tested. Small on purpose: 2 shared CPU cores, about 0.5-3 minutes a run.
# Usage: docs/benchmarks/scratch-models-cpu/compare.sh OUT_DIR [SEEDS...]  (from the repo root)
# EPOCHS=60 MODELS=small_resnet compare.sh OUT_DIR: another budget for some models, in results-e60.csv
# and runs/*-e60 (the default 20 epochs write results.csv). Then: python summarise.py OUT_DIR/results*.csv
set -euo pipefail
out=${1:?usage: compare.sh OUT_DIR [SEEDS...]}
shift
seeds=${*:-1 2 3}
epochs=${EPOCHS:-20}
models=${MODELS:-small_cnn small_resnet keras_scratch}
tag=$([ "$epochs" = 20 ] || echo "-e$epochs")
results="$out/results$tag.csv"
mkdir -p "$out"
lscpu | grep -E "Model name|^CPU\(s\)|Flags" > "$out/machine.txt"
make_data() {  # NAME GRAY DATA_SEED
  [ -d "$out/data/$1" ] || scripts/in_venv.sh python -c "import sys; from tests.images_data import \
make_textured_shapes_folder as m; m(sys.argv[1], per_class=200, seed=int(sys.argv[3]), gray=sys.argv[2] == '1')" \
    "$out/data/$1" "$2" "$3"
}
make_data colour 0 11
make_data gray 1 12
[ -f "$results" ] || echo "data,size,seed,model,epochs,eval_accuracy,eval_loss,train_seconds" > "$results"
for seed in $seeds; do
  for data in colour:40 gray:32; do
    name=${data%%:*}; size=${data##*:}
    for model in $models; do
      dir="$out/runs/$name-seed$seed-$model$tag"
      [ -f "$dir/results.json" ] && continue
      scripts/in_venv.sh python scripts/train_images.py --data-dir "$out/data/$name" --model-dir "$dir" \
        --model "$model" --image-size "$size" --batch-size 32 --epochs "$epochs" --learning-rate 1e-3 \
        --lr-schedule cosine --augment flip,rotate=15,zoom=0.1,translate=0.1 --validation-fraction 0 \
        --deterministic --seed "$seed" --bootstrap-resamples 100 --log-steps 1000 >"$out/$name-seed$seed-$model$tag.log" 2>&1
      scripts/in_venv.sh python -c "import json,sys; r=json.load(open(sys.argv[1])); print(','.join(str(x) for x in \
(*sys.argv[2:7], round(r['eval_accuracy'], 4), round(r['eval_loss'], 4), r['train_seconds'])))" \
        "$dir/results.json" "$name" "$size" "$seed" "$model" "$epochs" >> "$results"
    done
  done
done
cat "$results"
