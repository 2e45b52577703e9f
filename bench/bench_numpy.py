"""bench_numpy.py — the numpy twins of bench_bw.c's cases, for the stitch/numpy ratios.

Run: python3 bench/bench_numpy.py RESULTS_FILE [--quick]   (spawned by bench/run.sh)

The expressions are written the way a numpy user writes them (float32 throughout, Python-float
scalars, no out= tricks): numpy has no erf, so the chain uses the tanh form of gelu, which stitch
computes with st_gelu_tanh. Same sizes, same input distribution (uniform [-3, 3)), same GB/s
definition (minimal bytes / best wall time of ITERS warm iterations; 1 GB = 1e9 bytes).
Invariant: every timed iteration computes a new result from the same input array.
"""
import sys
import time

import numpy as np

A, B, C = 1.25, -0.5, 0.75
N = 16 * 1024 * 1024
ROWS = COLS = 4096


def chain(x):
    t = x * A + B
    return 0.5 * t * (1.0 + np.tanh(0.7978845608028654 * (t + 0.044715 * t * t * t))) * C


def rowsum(x):
    return x.sum(axis=-1)


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def bench(fn, x, iters):
    fn(x)  # warm
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        y = fn(x)
        del y  # freeing the result is part of an iteration, as in the stitch loop
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[0], times[len(times) // 2]


def main():
    out = sys.argv[1]
    iters = 3 if "--quick" in sys.argv else 10
    rng = np.random.default_rng(1)
    x = (rng.random(N, dtype=np.float32) * 6.0 - 3.0).astype(np.float32)
    xm = x.reshape(ROWS, COLS)
    assert chain(x[:16]).dtype == np.float32 and softmax(xm[:2]).dtype == np.float32
    cases = [
        ("np_chain", chain, x, 2.0 * N * 4),
        ("np_rowsum", rowsum, xm, ROWS * COLS * 4 + ROWS * 4),
        ("np_softmax", softmax, xm, 2.0 * ROWS * COLS * 4),
        ("np_copy", np.copy, x, 2.0 * N * 4),
    ]
    with open(out, "w") as f:
        for name, fn, arr, nbytes in cases:
            best, med = bench(fn, arr, iters)
            print("  %-10s numpy    %7.2f GB/s best, %7.2f median (%.2f ms)"
                  % (name[3:], nbytes / best / 1e9, nbytes / med / 1e9, best * 1e3))
            f.write("%s_gbs %.6g\n%s_best_ms %.6g\n" % (name, nbytes / best / 1e9, name, best * 1e3))
            f.flush()
    print("  (numpy %s, single-threaded elementwise; x * A with a Python float stays float32)"
          % np.__version__)


if __name__ == "__main__":
    main()
