"""bench_colred.py — PyTorch eager twins of bench_colred.lua (same shapes, f32, CPU).
Run: python3 bench/bench_colred.py [reps] (threads: ST_THREADS, else every CPU)."""
import os
import sys
import time

import torch
import torch.nn.functional as F

reps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
if os.environ.get("ST_THREADS"):
    torch.set_num_threads(int(os.environ["ST_THREADS"]))
R, C = 4096, 1024


def pattern(shape, seed):
    n = 1
    for d in shape:
        n *= d
    i = torch.arange(n, dtype=torch.int64)
    return (((i * 7919 + seed * 104729) % 10007).float() / 10007.0 - 0.5).reshape(shape)


def bench(name, nbytes, it):
    it()
    it()
    t = []
    for _ in range(reps):
        a = time.perf_counter()
        it()
        t.append((time.perf_counter() - a) * 1e3)
    t.sort()
    med = t[(reps - 1) // 2]
    print(f"{name:<22} {med:8.3f} ms median (best {t[0]:.3f})  {nbytes / med / 1e6:6.1f} GB/s")


x, dy, h = pattern((R, C), 1), pattern((R, C), 4), pattern((R, C), 5)
w, b = pattern((C,), 2) * 0.4 + 1, pattern((C,), 3)
MB = R * C * 4
with torch.no_grad():
    bench("layernorm fwd", 2 * MB, lambda: F.layer_norm(x, (C,), w, b))
xg, wg, bg = x.clone().requires_grad_(), w.clone().requires_grad_(), b.clone().requires_grad_()


def ln_fb():
    xg.grad = wg.grad = bg.grad = None
    F.layer_norm(xg, (C,), wg, bg).backward(dy)


bench("layernorm fwd+bwd", 4 * MB, ln_fb)
bench("x:sum(1)", MB, lambda: x.sum(0))
bench("bias grad (relu')", 2 * MB, lambda: (dy * (h > 0).float()).sum(0))

xb = pattern((64, 32, 16, 16), 6)
wb, bb = pattern((32,), 7) * 0.4 + 1, pattern((32,), 8)
MBB = 64 * 32 * 16 * 16 * 4
with torch.no_grad():
    bench("batchnorm2d fwd", 2 * MBB, lambda: F.batch_norm(xb, None, None, wb, bb, training=True))
    bench("mean over (N,H,W)", MBB, lambda: xb.mean((0, 2, 3)))
