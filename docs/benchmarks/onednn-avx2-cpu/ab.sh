#!/bin/bash
# TensorFlow 2.15's oneDNN kernels on a CPU without AVX-512, where TensorFlow leaves them off by default:
# the same benchmark invocations with TF_ENABLE_ONEDNN_OPTS=0 (TensorFlow's default here: Eigen kernels)
# and =1, in turns, the order swapped every pair. Usage: ab.sh OUT [PAIRS]; summary.py OUT reads it.
set -u
cd "$(dirname "$0")/../../.."
out=$1; pairs=${2:-4}
mkdir -p "$out"
measure() {  # name, TF_ENABLE_ONEDNN_OPTS value, pair
  local name=$1 opts=$2 pair=$3 args
  case $name in
    fashion) args="--task fashion --batch-size 64,512 --engines estimator,keras --precision fp32 --timed-steps 30" ;;
    vgg64) args="--task oct --image-size 64 --weights none --batch-size 32 --engines estimator,keras --precision fp32
                 --warm-up-steps 5 --timed-steps 10" ;;
    bf16) args="--task fashion --batch-size 64,512 --engines estimator --precision fp32,bf16 --timed-steps 10" ;;
  esac
  TF_ENABLE_ONEDNN_OPTS=$opts .venv/bin/python scripts/benchmark.py $args --synthetic --data synthetic \
    --cpu-replicas 1 --repeats 1 --output "$out/$name-opts$opts-$pair" > "$out/$name-opts$opts-$pair.log" 2>&1
  echo "$name opts=$opts pair=$pair rc=$?"
}
for pair in $(seq 1 "$pairs"); do
  order="0 1"; [ $((pair % 2)) = 0 ] && order="1 0"
  for name in fashion vgg64 bf16; do
    for opts in $order; do measure $name $opts $pair; done
  done
done
