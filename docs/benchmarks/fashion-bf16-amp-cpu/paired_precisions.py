"""Paired ratios of precisions from one benchmark invocation's results.csv: per repeat, a/b of images_per_sec_span."""
import csv, statistics as st, sys
rows = list(csv.DictReader(open(sys.argv[1])))
key = lambda r: (r["engine"], r["per_replica_batch_size"], r["precision"], r["repeat"])
by = {key(r): float(r["images_per_sec_span"]) for r in rows}
engines = sorted({r["engine"] for r in rows}); batches = sorted({r["per_replica_batch_size"] for r in rows}, key=int)
for a, b in [("bf16-amp", "bf16"), ("bf16-amp", "fp32"), ("bf16", "fp32")]:
    for e in engines:
        for bs in batches:
            reps = sorted({r["repeat"] for r in rows})
            ratios = [by[(e, bs, a, k)] / by[(e, bs, b, k)] for k in reps if (e, bs, a, k) in by and (e, bs, b, k) in by]
            if ratios:
                print(f"{a}/{b} {e:9s} batch {bs:>3}: median {st.median(ratios):.2f} [{min(ratios):.2f}..{max(ratios):.2f}] >=1 in {sum(x >= 1 for x in ratios)}/{len(ratios)}")
