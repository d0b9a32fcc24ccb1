#!/bin/bash
cd /work/main
for i in 1 2 3; do
  for v in base aff; do
    if [ $v = aff ]; then export KMP_AFFINITY=granularity=fine,compact,1,0 OMP_PROC_BIND=true KMP_BLOCKTIME=1; else unset KMP_AFFINITY OMP_PROC_BIND KMP_BLOCKTIME; fi
    .venv/bin/python scripts/benchmark.py --task fashion --synthetic --data synthetic --cpu-replicas 1 --batch-size 512 --engines estimator --precision bf16 --repeats 1 --warm-up-steps 5 --timed-steps 30 --output /tmp/aff/$v-$i > /tmp/aff/$v-$i.log 2>&1
    echo "$v-$i rc=$? $(python3 -c "import json;r=json.load(open('/tmp/aff/$v-$i/results.json'))['rows'];print([(x['precision'],x['global_batch_size'],round(x['images_per_sec_span'],1)) for x in r])")"
  done
done
