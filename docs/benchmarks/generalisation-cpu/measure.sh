#!/usr/bin/env bash
# Issue 33, part 8: what --ema, --label-smoothing, --mixup/--cutmix, --tta and --calibrate temperature
# each do to test accuracy, NLL and ECE, paired by seed against the plain run, on three datasets:
# - the shipped Fashion-MNIST sample (make_fashion_sample.py: 800 train, of which 10% validation, 200 test),
#   the sample recipe: batch 32, 20 epochs, Adam 1e-3 unscaled;
# - the shipped OCT sample (make_oct_sample.py: 105 train, of which 10% validation, 24 test), VGG16 from
#   random weights (no ImageNet weights offline) at 64 px, batch 16, 15 epochs, the preset's rate 1e-4;
# - two generated class-folder datasets (tests/images_data.make_textured_shapes_folder: 3 classes x 200
#   images of striped shapes on striped backgrounds; 20% test, 10% of the rest validation), the images
#   preset (small_resnet, batch 32, Adam 1e-3) with the small-data augmentation its --help advises:
#   colour at 40 px for 20 epochs, and gray (another data seed) at 32 px for 40 epochs.
# Usage: docs/benchmarks/generalisation-cpu/measure.sh OUT_DIR [SEEDS]  (from the repo root; SEEDS 1-5)
# A run whose report is already in OUT_DIR is not made again. Then: OUT_DIR/<name>/report.md.
set -euo pipefail
out=${1:?usage: measure.sh OUT_DIR [SEEDS]}
seeds=${2:-1-5}
py="scripts/in_venv.sh python"
mkdir -p "$out"
lscpu | grep -E "Model name|^CPU\(s\)|CPU family|^Model:" > "$out/machine.txt"
grep -o -w -E "avx512_bf16|amx_bf16|amx_tile" /proc/cpuinfo | sort -u | tr '\n' ' ' >> "$out/machine.txt" || true
[ -f "$out/fashion-data/train-images-idx3-ubyte.gz" ] || $py scripts/make_fashion_sample.py --out "$out/fashion-data" >/dev/null
[ -d "$out/oct-data/OCT2017" ] || $py scripts/make_oct_sample.py --out "$out/oct-data" >/dev/null
[ -d "$out/images-data" ] || $py -c "import sys; from tests.images_data import make_textured_shapes_folder as m; \
m(sys.argv[1], per_class=200, seed=11, gray=False)" "$out/images-data"
[ -d "$out/gray-data" ] || $py -c "import sys; from tests.images_data import make_textured_shapes_folder as m; \
m(sys.argv[1], per_class=200, seed=12, gray=True)" "$out/gray-data"

$py scripts/measure_generalisation.py --task fashion --output "$out/fashion" --seeds "$seeds" \
  --name "Fashion-MNIST sample (800 train incl. validation / 200 test)" \
  --data-dir "$out/fashion-data" --epochs 20 --batch-size 32 --learning-rate 1e-3 --lr-scaling none
$py scripts/measure_generalisation.py --task images --output "$out/images" --seeds "$seeds" \
  --name "generated shapes (3 classes x 200 colour images, 40 px)" \
  --data-dir "$out/images-data" --image-size 40 --epochs 20 --augment flip,rotate=15,zoom=0.1,translate=0.1
$py scripts/measure_generalisation.py --task oct --output "$out/oct" --seeds "$seeds" \
  --name "OCT sample (105 train incl. validation / 24 test), VGG16 from random weights, 64 px" \
  --data-dir "$out/oct-data" --weights none --image-size 64 --epochs 15 --batch-size 16
$py scripts/measure_generalisation.py --task images --output "$out/gray" --seeds "$seeds" \
  --name "generated shapes (3 classes x 200 gray images, 32 px, 40 epochs)" \
  --data-dir "$out/gray-data" --image-size 32 --epochs 40 --augment flip,rotate=15,zoom=0.1,translate=0.1
