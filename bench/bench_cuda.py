"""bench_cuda.py — the PyTorch twins of bench_cuda.c on the same GPU, and the GPU ratio report.

Run: python3 bench/bench_cuda.py RESULTS_FILE [--quick]       (PyTorch, CUDA; bench/run_gpu.sh does)
     python3 bench/bench_cuda.py --report STITCH_RESULTS TORCH_RESULTS   (ratios only; no torch needed)

Without torch or without a usable CUDA device it prints one line saying so and exits 0.

Cases (f32, the same shapes and expressions as bench_cuda.c; inputs in [-3, 3) made on the GPU):
  chain       sigmoid(x * 1.5 + y) * tanh(y) - exp(-(x * x))   x, y: 64M; eager runs 9 kernels
  rowsum_1k / rowsum_8k     x.view(65536, 1024).sum(-1) / x.view(8192, 8192).sum(-1)
  colsum_1k / sum_all       x.view(65536, 1024).sum(0) / x.sum()
  softmax_1k / softmax_8k   torch.softmax(view, -1)
  copy        dst.copy_(x): torch's own device-to-device copy, 2 * 256 MiB moved
  tiny        x1024 + 1: host cost of one eager op (1000 back to back, one synchronize)
  chain_compiled  torch.compile of the chain function (its compile time reported apart); n/a when
                  torch.compile fails here (no Triton, ...)
Timing as in bench_cuda.c: each iteration ends with torch.cuda.synchronize(); best of ITERS (the
headline), median, and pipelined (ITERS back to back, one synchronize). GB/s = minimal bytes / time,
1 GB = 1e9 B. Writes `key value` lines prefixed torch_.
"""
import statistics
import sys
import time

from report import load  # bench/ is this script's directory, so on sys.path

N = 64 * 1024 * 1024
TINY_N = 1024
TINY_LOOP = 1000




def chain(x, y):
    import torch
    return torch.sigmoid(x * 1.5 + y) * torch.tanh(y) - torch.exp(-(x * x))


def bench(torch, fn, iters):
    """(best, median, pipelined) seconds of fn(); each synced iteration ends with a synchronize."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    t = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        t.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    torch.cuda.synchronize()
    pipe = (time.perf_counter() - t0) / iters
    return min(t), statistics.median(t), pipe


def run(out_path, quick):
    try:
        import torch
    except ImportError as e:
        print("bench_cuda.py: no PyTorch (%s); skipped" % e)
        return 0
    if not torch.cuda.is_available():
        print("bench_cuda.py: PyTorch %s sees no CUDA device; skipped" % torch.__version__)
        return 0
    iters = 5 if quick else 30
    dev = torch.device("cuda")
    out = open(out_path, "w")

    def put(k, v):
        out.write("%s %.6g\n" % (k, v))
        out.flush()

    print("device: %s; torch %s, CUDA %s" % (torch.cuda.get_device_name(0), torch.__version__,
                                             torch.version.cuda))
    g = torch.Generator(device=dev).manual_seed(0)
    x = torch.rand(N, device=dev, generator=g) * 6 - 3
    y = torch.rand(N, device=dev, generator=g) * 6 - 3
    x1k, x8k = x.view(N // 1024, 1024), x.view(8192, 8192)
    dst = torch.empty_like(x)
    f4 = 4.0
    cases = [
        ("copy", lambda: dst.copy_(x), 2 * N * f4),
        ("chain", lambda: chain(x, y), 3 * N * f4),
        ("rowsum_1k", lambda: x1k.sum(-1), (N + N // 1024) * f4),
        ("rowsum_8k", lambda: x8k.sum(-1), (N + 8192) * f4),
        ("colsum_1k", lambda: x1k.sum(0), (N + 1024) * f4),
        ("sum_all", lambda: x.sum(), N * f4),
        ("softmax_1k", lambda: torch.softmax(x1k, -1), 2 * N * f4),
        ("softmax_8k", lambda: torch.softmax(x8k, -1), 2 * N * f4),
    ]
    print("torch eager, %d iterations each ending with torch.cuda.synchronize (best, median), then %d "
          "back to back (pipelined):" % (iters, iters))
    for name, fn, nbytes in cases:
        best, med, pipe = bench(torch, fn, iters)
        print("  %-15s %8.1f GB/s best (%.3f ms), %8.1f median, %8.1f pipelined"
              % (name, nbytes / best / 1e9, best * 1e3, nbytes / med / 1e9, nbytes / pipe / 1e9))
        put("torch_%s_gbs" % name, nbytes / best / 1e9)
        put("torch_%s_pipe_gbs" % name, nbytes / pipe / 1e9)
        put("torch_%s_best_ms" % name, best * 1e3)

    xt = x[:TINY_N].clone()
    for _ in range(10):
        xt + 1
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(TINY_LOOP):
        xt + 1
    torch.cuda.synchronize()
    us = (time.perf_counter() - t0) / TINY_LOOP * 1e6
    print("  %-15s %.2f us per eager op (x + 1, %d elements, %d back to back)" % ("launch", us, TINY_N,
                                                                                  TINY_LOOP))
    put("torch_tiny_us", us)

    # torch.compile of the chain: one fused Triton kernel when it works.
    try:
        t0 = time.perf_counter()
        cchain = torch.compile(chain)
        cchain(x, y)
        torch.cuda.synchronize()
        first = time.perf_counter() - t0
        best, med, pipe = bench(torch, lambda: cchain(x, y), iters)
        nbytes = 3 * N * f4
        print("  %-15s %8.1f GB/s best (%.3f ms), %8.1f median, %8.1f pipelined; first call (compile) "
              "%.0f ms" % ("chain_compiled", nbytes / best / 1e9, best * 1e3, nbytes / med / 1e9,
                           nbytes / pipe / 1e9, first * 1e3))
        put("torch_chain_compiled_gbs", nbytes / best / 1e9)
        put("torch_chain_compiled_best_ms", best * 1e3)
        put("torch_chain_compiled_first_ms", first * 1e3)
    except Exception as e:  # noqa: BLE001 -- any failure of the compiler stack means "n/a"
        msg = str(e).strip().splitlines()
        print("  chain_compiled  n/a: torch.compile failed: %s: %s" % (type(e).__name__,
                                                                        msg[0] if msg else ""))
    out.close()
    return 0


def report(paths):
    """The ratio lines of one GPU run (bench_cuda.c's and this script's result files)."""
    r = load(paths)

    def g(k, fmt="%.1f"):
        return fmt % r[k] if k in r else "n/a"

    def ratio(a, b):
        return r[a] / r[b] if a in r and b in r and r[b] else None

    def pct(a, b):
        v = ratio(a, b)
        return "n/a" if v is None else "%.0f%%" % (100 * v)

    if "cuda_skipped" in r:
        print("GPU benchmarks skipped: no usable GPU on this machine")
        return 0
    print("device copy (cuda_copy_dtod, 256 MiB): %s GB/s best, %s pipelined; torch copy_ %s GB/s"
          % (g("copy_gbs"), g("copy_pipe_gbs"), g("torch_copy_gbs")))
    for case in ["chain", "rowsum_1k", "rowsum_8k", "colsum_1k", "sum_all", "softmax_1k", "softmax_8k"]:
        line = "%s: stitch %s GB/s (%s ms) = %s of device copy (pipelined %s GB/s = %s); torch eager %s GB/s" % (
            case, g(case + "_gbs"), g(case + "_best_ms", "%.3f"), pct(case + "_gbs", "copy_gbs"),
            g(case + "_pipe_gbs"), pct(case + "_pipe_gbs", "copy_pipe_gbs"), g("torch_%s_gbs" % case))
        v = ratio("torch_%s_best_ms" % case, case + "_best_ms")
        if v is not None:
            line += " (torch time / stitch time = %.2fx)" % v
        print(line)
        print("    cold first call %s ms (%s kernels compiled, %s ms compile), %s launches/iter, host "
              "exec %s ms/iter, max err %s" % (
                  g(case + "_first_ms", "%.0f"), g(case + "_compiled", "%.0f"),
                  g(case + "_compile_ms", "%.0f"), g(case + "_launches"), g(case + "_host_ms", "%.3f"),
                  g(case + "_maxerr", "%.2g")))
    v = ratio("torch_chain_compiled_best_ms", "chain_best_ms")
    print("chain vs torch.compile: %s GB/s (%s ms)%s" % (
        g("torch_chain_compiled_gbs"), g("torch_chain_compiled_best_ms", "%.3f"),
        "" if v is None else " (torch.compile time / stitch time = %.2fx)" % v))
    print("launch: stitch %s us per flush (%s with a synchronize each), bare driver enqueue %s us, "
          "torch eager op %s us" % (g("tiny_flush_us", "%.2f"), g("tiny_sync_us", "%.2f"),
                                    g("dtod4k_us", "%.2f"), g("torch_tiny_us", "%.2f")))
    print("NVRTC compile (cold): %s ms per kernel (%s kernels, %s ms); cached load %s ms per kernel "
          "(%s disk hits)" % (g("compile_ms_per_kernel"), g("kernels_compiled", "%.0f"),
                              g("compile_ms", "%.0f"), g("cached_load_ms_per_kernel", "%.2f"),
                              g("cache_hits_disk", "%.0f")))

    def goal(name, v, floor):
        print("goal %-40s %s" % (name, "n/a" if v is None else
                                  "%s (%.2f)" % ("met" if v >= floor else "MISSED", v)))

    goal("chain >= 0.85 x device copy:", ratio("chain_gbs", "copy_gbs"), 0.85)
    goal("rowsum_8k >= 0.85 x device copy:", ratio("rowsum_8k_gbs", "copy_gbs"), 0.85)
    goal("softmax_8k >= 0.85 x device copy:", ratio("softmax_8k_gbs", "copy_gbs"), 0.85)
    goal("chain >= 3x torch eager (time):", ratio("torch_chain_best_ms", "chain_best_ms"), 3.0)
    return 0


def main():
    args = sys.argv[1:]
    if args and args[0] == "--report":
        return report(args[1:])
    if not args or args[0].startswith("--"):
        print("usage: bench_cuda.py RESULTS_FILE [--quick] | --report RESULTS_FILE...", file=sys.stderr)
        return 2
    return run(args[0], "--quick" in args[1:])


if __name__ == "__main__":
    sys.exit(main())
