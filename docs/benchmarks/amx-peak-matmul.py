"""One large matmul in bfloat16 and float32 through TensorFlow, best of 3 calls: whether the peak probe
(scripts/probe_peak.py) underestimates what this CPU's kernels reach.

    python docs/benchmarks/amx-peak-matmul.py
"""
import time, tensorflow as tf
for dtype in (tf.bfloat16, tf.float32):
    for n in (4096, 8192):
        a = tf.cast(tf.random.stateless_normal([n, n], seed=[1, 2]), dtype)
        b = tf.cast(tf.random.stateless_normal([n, n], seed=[3, 4]), dtype)
        f = tf.function(lambda a, b: tf.matmul(a, b))
        f(a, b).numpy()
        best = 0
        for _ in range(3):
            t = time.perf_counter(); f(a, b).numpy(); dt = time.perf_counter() - t
            best = max(best, 2 * n ** 3 / dt / 1e9)
        print(dtype.name, n, round(best), "GFLOP/s", flush=True)
