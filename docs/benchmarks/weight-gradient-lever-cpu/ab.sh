#!/bin/bash
# alternate base / matmul-weight-gradient invocations of one benchmark command
cd /tmp/exp
out=$1; shift
for i in $(seq 1 ${PAIRS:-3}); do
  for v in base exp; do
    if [ $v = exp ]; then export WGRAD_EXP=1; else unset WGRAD_EXP; fi
    .venv/bin/python scripts/benchmark.py "$@" --output $out/$v-$i > $out/$v-$i.log 2>&1
    echo "$v-$i rc=$? $(python3 -c "import json;r=json.load(open('$out/$v-$i/results.json'))['rows'];print([(x['precision'],x['global_batch_size'],round(x['images_per_sec_span'],1)) for x in r])")"
  done
done
