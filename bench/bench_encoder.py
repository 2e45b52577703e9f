"""bench_encoder.py — a transformer encoder layer's training step on the CPU: stitch
(bench_encoder.lua in a child process) against PyTorch eager and torch.compile (this process), in
the same run: nn.TransformerEncoderLayer(128, 4, dim_feedforward=512, batch_first=True), a causal
batch (B, L, 128), loss mean(y^2), backward, SGD, with dropout 0.1 (training) and 0, for (B, L) =
(16, 64) and (4, 256). Dropout draws different numbers in each library, so the losses are not
compared; with dropout 0 they start from different initial weights too (each library's own init).

Run: python3 bench/bench_encoder.py [--quick] [--build DIR] [--no-compile]   (make -C bench encoder
[TPY=PY]; threads: ST_THREADS for both, else every CPU). Prints per case the median ms per step
and stitch's time over each peer's (below 1: stitch is faster)."""
import os
import subprocess
import sys
import tempfile
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
SHAPES = [(16, 64), (4, 256)]
DROPS = (0.1, 0.0)


def median_ms(step, reps):
    for _ in range(5):
        step()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(10):
            step()
        ts.append((time.perf_counter() - t0) * 100)
    ts.sort()
    return ts[(len(ts) - 1) // 2]


def torch_step(B, L, drop, compiled):
    torch.manual_seed(1)
    layer = torch.nn.TransformerEncoderLayer(128, 4, dim_feedforward=512, dropout=drop, batch_first=True)
    opt = torch.optim.SGD(layer.parameters(), lr=0.01)
    x = torch.randn(B, L, 128)
    mask = torch.nn.Transformer.generate_square_subsequent_mask(L)

    def fwd(x):
        y = layer(x, src_mask=mask, is_causal=True)
        return (y * y).mean()
    f = torch.compile(fwd) if compiled else fwd

    def step():
        opt.zero_grad()
        f(x).backward()
        opt.step()
    return step


def main():
    quick = "--quick" in sys.argv
    compiled = "--no-compile" not in sys.argv
    build = sys.argv[sys.argv.index("--build") + 1] if "--build" in sys.argv else os.path.join(HERE, "..", "build")
    threads = os.environ.get("ST_THREADS")
    if threads:
        torch.set_num_threads(int(threads))
    reps = 3 if quick else 7
    res = {}
    for (B, L) in SHAPES:
        for drop in DROPS:
            tag = "b%dl%d_drop%g" % (B, L, drop)
            res[tag + "_eager"] = median_ms(torch_step(B, L, drop, False), reps)
            if compiled:
                try:
                    res[tag + "_compile"] = median_ms(torch_step(B, L, drop, True), reps)
                except Exception as e:  # noqa: BLE001 - a peer that cannot run shows n/a
                    print("torch.compile failed for %s: %s" % (tag, str(e).splitlines()[0]))
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "stitch.txt")
        env = dict(os.environ, ST_JIT_ASYNC="0", ST_CACHE_DIR=tmp)
        cmd = [os.path.join(build, "stitch"), os.path.join(HERE, "bench_encoder.lua")] + (["--quick"] if quick else []) + [out]
        subprocess.run(cmd, check=True, env=env)
        for line in open(out):
            key, val = line.split()
            res[key] = float(val)
    print("TransformerEncoderLayer training step on the CPU (torch %s, %d threads), median ms per step; "
          "ratios below 1: stitch is faster" % (torch.__version__, torch.get_num_threads()))
    print("%-16s %9s %9s %9s %9s %9s" % ("case", "stitch", "eager", "compile", "st/eager", "st/comp"))
    for (B, L) in SHAPES:
        for drop in DROPS:
            tag = "b%dl%d_drop%g" % (B, L, drop)
            s, e, c = res[tag + "_ms"], res[tag + "_eager"], res.get(tag + "_compile")
            print("%-16s %9.3f %9.3f %9s %9.2f %9s" % (tag, s, e, "%.3f" % c if c else "n/a", s / e,
                                                      "%.2f" % (s / c) if c else "n/a"))


if __name__ == "__main__":
    main()
