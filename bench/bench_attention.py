"""bench_attention.py — attention on the CPU (issue 14's attention op): stitch's attention op (one
kernel, the scores never stored; bench_attention.lua in a child process) against stitch's composed
form (matmul, where, softmax, matmul) and PyTorch's torch.nn.functional.scaled_dot_product_attention
(eager; this process), in the same run, forward and forward + backward, causal, not, and with a key
padding mask (bool (B, 1, 1, L), batch entry b's last (b % 4 + 1) L / 8 keys masked), on three
shapes (B, H, L, E): the transformer block's (16, 4, 64, 32), (4, 4, 256, 64), (2, 4, 1024, 64).

Run: python3 bench/bench_attention.py [--quick] [--build DIR]   (make -C bench attention [TPY=PY];
threads: ST_THREADS for both, else every CPU). Prints per case the median ms of each and the
ratios fused / composed and fused / torch (below 1: stitch's attention op is faster)."""
import math
import os
import subprocess
import sys
import tempfile
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
SHAPES = [(16, 4, 64, 32), (4, 4, 256, 64), (2, 4, 1024, 64)]
VARIANTS = ("_causal", "", "_padded")


def median_ms(f, n, reps):
    for _ in range(2):
        f()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(n):
            f()
        ts.append((time.perf_counter() - t0) * 1e3 / n)
    ts.sort()
    return ts[(len(ts) - 1) // 2]


def main():
    quick = "--quick" in sys.argv
    build = sys.argv[sys.argv.index("--build") + 1] if "--build" in sys.argv else os.path.join(HERE, "..", "build")
    threads = os.environ.get("ST_THREADS")
    if threads:
        torch.set_num_threads(int(threads))
    F = torch.nn.functional
    res = {}
    for (B, H, L, E) in SHAPES:
        name = "b%dh%dl%de%d" % (B, H, L, E)
        g = torch.Generator().manual_seed(1)
        q, k, v, go = (torch.randn(B, H, L, E, generator=g) for _ in range(4))
        n = max(2, int((2e7 if quick else 1e8) / (B * H * L * L * E)))
        pad = torch.stack([(torch.arange(L) < L - (b % 4 + 1) * L // 8).reshape(1, 1, L) for b in range(B)])
        for variant in VARIANTS:
            tag, causal, mask = name + variant, variant == "_causal", pad if variant == "_padded" else None
            with torch.no_grad():
                res[tag + "_torch_fwd_ms"] = median_ms(
                    lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal), n, 3 if quick else 7)
            qa, ka, va = (t.clone().requires_grad_() for t in (q, k, v))

            def fb():
                for t in (qa, ka, va):
                    t.grad = None
                F.scaled_dot_product_attention(qa, ka, va, attn_mask=mask, is_causal=causal).backward(go)
            res[tag + "_torch_fwdbwd_ms"] = median_ms(fb, n, 3 if quick else 7)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "stitch.txt")
        env = dict(os.environ, ST_JIT_ASYNC="0", ST_CACHE_DIR=tmp)
        cmd = [os.path.join(build, "stitch"), os.path.join(HERE, "bench_attention.lua")] + (["--quick"] if quick else []) + [out]
        subprocess.run(cmd, check=True, env=env)
        for line in open(out):
            key, val = line.split()
            res[key] = float(val)
    print("attention on the CPU (torch %s, %d threads), median ms; ratios below 1: the attention op is faster" %
          (torch.__version__, torch.get_num_threads()))
    print("%-24s %-7s %9s %9s %9s %8s %8s" % ("case", "pass", "fused", "composed", "torch", "f/comp", "f/torch"))
    for (B, H, L, E) in SHAPES:
        for variant in VARIANTS:
            tag = "b%dh%dl%de%d" % (B, H, L, E) + variant
            for p in ("fwd", "fwdbwd"):
                f, c, t = (res["%s_%s_%s_ms" % (tag, w, p)] for w in ("fused", "composed", "torch"))
                print("%-24s %-7s %9.3f %9.3f %9.3f %8.2f %8.2f" % (tag, p, f, c, t, f / c, f / t))


if __name__ == "__main__":
    main()
