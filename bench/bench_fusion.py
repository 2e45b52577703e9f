"""bench_fusion.py — fusion depth (issue 5): stitch vs PyTorch eager (and torch.compile where it
exists) on softmax, layernorm fwd and fwd+bwd, cross-entropy fwd+bwd, an AdamW step, Linear+GELU, one
transformer-block training step and the Fashion-MNIST MLP step; kernels per iteration; the ST_FUSE
ablation. This file is the PyTorch twin of bench_fusion.lua and the driver that runs both.
Optional peers on the CPU (issue 15): JAX (jax.jit, XLA) and tinygrad (TinyJit), bench_fusion_peers.py.

Run: /usr/bin/python3 bench/bench_fusion.py [--quick] [--no-ablation] [--no-peers] [--cases=a,b]
                                             [--build DIR] [--device cuda]
     (make -C bench fusion [QUICK=1] [TPY=python with torch, jax, tinygrad]; full run: ~3-5 min,
     +2-3 min with both peers (tinygrad compiles the block step for ~40 s); --quick (2 ablation
     settings) ~1.5 min)

Order: stitch (build/stitch bench/bench_fusion.lua, a fresh kernel cache dir), then the PyTorch
twins in this process, then (CPU, unless --no-peers) each peer in a child process of this Python
(bench_fusion_peers.py --peer=jax|tinygrad: same inputs bit for bit, same checksums compared with
torch eager's, same timing rule, the same thread count: see its docstring); a peer that cannot be
imported prints "<peer>: not installed (...)" and its columns are n/a (Debian's python3 has
neither). Then stitch once per ST_FUSE setting of the ablation (--quick iteration counts), then the
tables: the results table, then "stitch vs every baseline of this run" (eager, torch.compile,
jax.jit, tinygrad: times and stitch / baseline; a peer whose checksum mismatches is FAILED and its
ratio invalid). Threads: ST_THREADS if set, else every CPU; torch.set_num_threads gets
the same number. Each library waits between kernels its own default way: torch's libgomp threads
spin for a while, then sleep (OMP_WAIT_POLICY is left as the caller has it; until 2026-11-29 this
script set PASSIVE for both: in one pair of runs that made torch's block and MLP steps 1.4-2.5x
slower); stitch's kernels run on its own pool (device/cpu_pool.c: spin up to ST_SPIN_US, none when oversubscribed).
Inputs are bit-identical in both (bench_fusion.lua's integer pattern); each case's outputs are
compared once through two checksums (sum(y * w), sum(|y|)): a mismatch marks the case FAILED.
Timing (both sides): after the check call, a first call and a warm-up call are excluded, then
iterations are timed one by one until REPS or a time budget (at least 3; 2 when an iteration takes
over SLOW_S); the median is the figure, best printed too.
Kernels: stitch = st.stats().kernels_launched per timed iteration; PyTorch = bench_train.py's rule
(KERNEL_RULE below) over a torch.profiler trace of the first call (one iteration, after the check).

--device cuda (bench/run_gpu.sh runs it with --no-ablation): stitch with ST_DEVICE=cuda and
bench_fusion.lua --device=cuda (inputs made on the GPU; each timed call ends with a device -> host
read of one element, which waits for the stream: st.sync alone only queues), PyTorch on
torch.device("cuda") with torch.cuda.synchronize() after each timed call. Both also report a
pipelined time (as many iterations back to back, one wait at the end). The same run measures the
device copy (y.copy_(x), 1 GiB f32, CUDA-event time, best of 10, bytes = 2 x 1 GiB) and prints, for
the memory-bound cases (MEM_BOUND), min_bytes() / time / copy bandwidth for stitch, eager and
torch.compile. Kernels on the GPU: stitch = st.stats().kernels_launched per iteration; PyTorch =
CUDA kernel events of one profiled iteration after the timed ones (torch.profiler, CPU + CUDA
activities; Memcpy/Memset events counted apart). No CUDA device for torch: one line "no CUDA
device: ...", exit status 0 (as bench_cuda.py); torch sees one but stitch does not: the stitch
columns are n/a and the exit status is 1 (a GPU machine whose stitch cannot load the driver is a
broken setup, not a skip).
"""
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from report import load  # noqa: E402

CASES = ["softmax", "layernorm_fwd", "layernorm", "cross_entropy", "adamw", "linear_gelu", "block", "mlp"]
# Sizes of the memory-bound cases per device: rows of softmax, layernorm and cross-entropy, and C = V
# of the block whose 14 parameters AdamW steps (bench_fusion.lua: ROWS, ADAMW_C). On the GPU 8x the
# rows and C = 1024: working sets well above the 50 MB L2, kernels of ~0.1 ms or more.
SIZES = {"cpu": (4096, 512), "cuda": (32768, 1024)}
LABELS = {
    "softmax": "softmax {R}x4096 fwd", "layernorm_fwd": "layernorm {R}x1024 fwd",
    "layernorm": "layernorm {R}x1024 fwd+bwd",
    "cross_entropy": "cross-entropy {R}x1024 fwd+bwd", "adamw": "AdamW step, 14 params ({N:.1f}M)",
    "linear_gelu": "Linear+GELU 4096x1024x1024", "block": "transformer block train step",
    "mlp": "MLP train step (F-MNIST)",
}
# --quick runs only the first and the last setting (a smoke test of the ablation path).
ABLATION = ["", "-stitch", "-inline", "-reduce", "-multi", "-prologue", "-epilogue", "-horizontal", "none"]
# aten ops these cases call beyond bench_train.py's lists that run no kernel of their own: wrappers
# (layer_norm -> native_layer_norm; masked_fill -> clone's copy_ + masked_fill_), a view (split)
# and a shape comparison (is_same_size, in layer_norm's backward).
EXTRA_SKIP = {"aten::layer_norm", "aten::masked_fill", "aten::split", "aten::is_same_size"}
KERNEL_RULE = ("torch kernels = aten:: events per iteration (torch.profiler, CPU) except views, allocation "
               "and scalar reads (bench_train.NO_DATA), ops that only dispatch to other counted aten ops "
               "(bench_train.WRAPPERS + %s), zero_ on >= 32768 elements (it calls fill_, counted) and ops "
               "whose inputs all have <= 1 element (Adam's step counters; also the block's one cat, split's "
               "backward, whose tensor list is recorded without shapes: left out, in torch's favour)"
               % ", ".join(sorted(n[6:] for n in EXTRA_SKIP)))
# GEMM rate used for the compute floor (bench/NOTES.md "Matmul": 1024^3 through st_matmul, quiet machine).
GEMM_GFLOPS = {1: 125.0, 2: 366.0}
SLOW_S = 1.0  # an iteration this slow: no extra warm-up, 2 timed runs suffice
MEM_BOUND = ["softmax", "layernorm_fwd", "layernorm", "cross_entropy", "adamw"]
COPY_BYTES = 1 << 30  # the device copy's tensor (--device cuda): 1 GiB each way


def label(c, device):
    rows, ac = SIZES[device]
    return LABELS[c].format(R=rows, N=adamw_numel(ac) / 1e6)


def prod(shape):
    n = 1
    for d in shape:
        n *= d
    return n


# ---------------------------------------------------------------------------------------------
# PyTorch twins (identical inputs, parameters and checksums to bench_fusion.lua)
# ---------------------------------------------------------------------------------------------

def torch_pattern(torch, shape, seed, dev=None):
    """bench_fusion.lua's input pattern: int64 index arithmetic, then a float32 divide."""
    i = torch.arange(prod(shape), dtype=torch.int64, device=dev)
    return (((i * 7919 + seed * 104729) % 10007).float() / 10007.0 - 0.5).reshape(shape)


def torch_init_params(torch, model, dev=None):
    """Every parameter from the pattern, seed 100 + its index in named_parameters(): matrices scaled
    by 2 / sqrt(fan_in), LayerNorm weights 1 + 0.2 x, the rest 0.2 x (bench_fusion.lua's rule)."""
    with torch.no_grad():
        for i, (name, p) in enumerate(model.named_parameters()):
            s = list(p.shape)
            if len(s) == 2:
                v = torch_pattern(torch, s, 100 + i, dev) * (2 / math.sqrt(s[1]))
            elif name.startswith("ln") and name.endswith("weight"):
                v = torch_pattern(torch, s, 100 + i, dev) * 0.2 + 1
            else:
                v = torch_pattern(torch, s, 100 + i, dev) * 0.2
            p.copy_(v)


def torch_block(torch, C, H, V):
    """The transformer block of the block and adamw cases (pre-LN, causal attention, GELU MLP, head)."""
    F = torch.nn.functional

    class Block(torch.nn.Module):
        def __init__(self, C, H, V):
            super().__init__()
            self.nhead = H
            self.ln1 = torch.nn.LayerNorm(C)
            self.qkv = torch.nn.Linear(C, 3 * C)
            self.proj = torch.nn.Linear(C, C)
            self.ln2 = torch.nn.LayerNorm(C)
            self.fc1 = torch.nn.Linear(C, 4 * C)
            self.fc2 = torch.nn.Linear(4 * C, C)
            self.head = torch.nn.Linear(C, V)

        def forward(self, x, notmask):
            B, T, C = x.shape
            H = self.nhead
            D = C // H
            q, k, v = [t.view(B, T, H, D).transpose(1, 2) for t in self.qkv(self.ln1(x)).split(C, dim=2)]
            att = ((q @ k.transpose(-2, -1)) * (1 / math.sqrt(D))).masked_fill(notmask, float("-inf")).softmax(-1)
            x = x + self.proj((att @ v).transpose(1, 2).reshape(B, T, C))
            x = x + self.fc2(F.gelu(self.fc1(self.ln2(x))))
            return self.head(x)

    return Block(C, H, V)


def torch_cases(torch, checks, wrap, dev):
    """{case: (setup -> (iter, outputs_for_check))}. wrap(f) is identity (eager) or torch.compile;
    every tensor and module is made on dev (a torch.device); sizes SIZES[dev.type]."""
    F = torch.nn.functional
    R, AC = SIZES[dev.type]

    def arange(n):
        return torch.arange(n, device=dev)

    def pattern(shape, seed):
        return torch_pattern(torch, shape, seed, dev)

    def inp(shape, seed, scale=1.0):
        return pattern(shape, seed) * scale

    def init_params(model):
        torch_init_params(torch, model, dev)

    def checksum(case, name, y):
        y = y.detach().double()
        w = pattern(list(y.shape), 7).double()
        checks["chk_%s_%s_w" % (case, name)] = float((y * w).sum())
        checks["chk_%s_%s_l1" % (case, name)] = float(y.abs().sum())

    def softmax():
        x = inp([R, 4096], 1, 8)
        f = wrap(lambda: x.softmax(-1))
        checksum("softmax", "y", f())
        return f

    def layernorm_fwd():
        x = inp([R, 1024], 1, 4)
        w, b = inp([1024], 2, 0.4) + 1, inp([1024], 3)
        f = wrap(lambda: F.layer_norm(x, (1024,), w, b))
        checksum("layernorm_fwd", "y", f())
        return f

    def layernorm():
        x = inp([R, 1024], 1, 4).requires_grad_()
        w = (inp([1024], 2, 0.4) + 1).requires_grad_()
        b = inp([1024], 3).requires_grad_()
        dy = inp([R, 1024], 4)
        fwd = wrap(lambda: F.layer_norm(x, (1024,), w, b))

        def run():
            x.grad = w.grad = b.grad = None
            y = fwd()
            y.backward(dy)
            return y
        y = run()
        for n, t in [("y", y), ("dx", x.grad), ("dw", w.grad), ("db", b.grad)]:
            checksum("layernorm", n, t)
        return run

    def cross_entropy():
        logits = inp([R, 1024], 1, 8).requires_grad_()
        target = (arange(R) * 31 + 7) % 1024
        fwd = wrap(lambda: F.cross_entropy(logits, target))

        def run():
            logits.grad = None
            loss = fwd()
            loss.backward()
            return loss
        checks["chk_cross_entropy_loss"] = float(run())
        checksum("cross_entropy", "dx", logits.grad)
        return run

    def adamw():
        model = torch_block(torch, AC, 8, AC).to(dev)
        init_params(model)
        params = list(model.parameters())
        for i, p in enumerate(params):
            p.grad = inp(list(p.shape), 201 + i, 0.01)
        opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=1e-2)
        step = wrap(opt.step)
        step()
        step()
        for name, i in [("p1", 0), ("p3", 2), ("p9", 8)]:
            checksum("adamw", name, params[i])
        return step

    def linear_gelu():
        x = inp([4096, 1024], 1)
        w, b = inp([1024, 1024], 2, 1 / 16), inp([1024], 3, 0.2)
        f = wrap(lambda: F.gelu(F.linear(x, w, b)))
        checksum("linear_gelu", "y", f())
        return f

    def train(case, model, opt, x, target, fwd):
        init_params(model)
        fwd = wrap(fwd)

        def step():
            opt.zero_grad()
            loss = F.cross_entropy(fwd(x), target)
            loss.backward()
            return loss
        loss = step()
        checks["chk_%s_loss1" % case] = float(loss)
        for i, p in enumerate(model.parameters()):
            if i % 2 == 0:
                checksum(case, "g%d" % (i + 1), p.grad)
        opt.step()
        checks["chk_%s_loss2" % case] = float(step())
        opt.step()

        def run():
            loss = step()
            opt.step()
            return loss
        return run

    def block():
        B, T, C, H, V = 16, 64, 128, 4, 256
        model = torch_block(torch, C, H, V).to(dev)
        notmask = ~(arange(T).reshape(T, 1) >= arange(T).reshape(1, T))
        x = inp([B, T, C], 1)
        target = (arange(B * T) * 31 + 7) % V
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-2)
        return train("block", model, opt, x, target, lambda xx: model(xx, notmask).reshape(B * T, V))

    def mlp():
        model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 128),
                                    torch.nn.ReLU(), torch.nn.Linear(128, 10)).to(dev)
        x = inp([128, 784], 1)
        target = (arange(128) * 31 + 7) % 10
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        return train("mlp", model, opt, x, target, model)

    return {"softmax": softmax, "layernorm_fwd": layernorm_fwd, "layernorm": layernorm, "cross_entropy": cross_entropy, "adamw": adamw,
            "linear_gelu": linear_gelu, "block": block, "mlp": mlp}


def time_iters(f, reps, budget_s, warm=2, on_first=None, sync=None):
    """(median ms, best ms, n, pipelined ms or None): the first call (run under on_first, e.g. the
    profiler) and warm-up excluded; an iteration slower than SLOW_S skips the extra warm-up and
    needs only 2 timed runs (the rule of bench_fusion.lua too: netlib's GEMM makes torch's
    Linear+GELU take seconds). sync (the GPU: torch.cuda.synchronize) ends every call, and then n
    more calls run back to back with one sync at the end: the pipelined ms per call."""
    g = f if sync is None else (lambda: (f(), sync()))
    a = time.perf_counter()
    if on_first:
        on_first(g)
    else:
        g()
    slow = time.perf_counter() - a > SLOW_S
    for _ in range(0 if slow else warm - 1):
        g()
    times, start, n_min = [], time.perf_counter(), 2 if slow else 3
    while len(times) < reps and not (len(times) >= n_min and time.perf_counter() - start > budget_s):
        a = time.perf_counter()
        g()
        times.append((time.perf_counter() - a) * 1e3)
    pipe = None
    if sync is not None:
        a = time.perf_counter()
        for _ in times:
            f()
        sync()
        pipe = (time.perf_counter() - a) * 1e3 / len(times)
    return statistics.median(times), min(times), len(times), pipe


def count_cuda_kernels(prof):
    """(kernels, memcpy + memset events, {short kernel name: count}) of a profiled iteration: the
    events torch.profiler records on the CUDA device (kineto), one per kernel launch."""
    kern, mem, names = 0, 0, {}
    for e in prof.events():
        if not str(getattr(e, "device_type", "")).endswith("CUDA"):
            continue
        if e.name.lower().startswith(("memcpy", "memset")):
            mem += 1
            continue
        kern += 1
        short = e.name.split("(")[0].split("<")[0].split("::")[-1][:40]
        names[short] = names.get(short, 0) + 1
    return kern, mem, names


def run_torch(torch, cases, quick, dev):
    """Eager (+ torch.compile where it exists): result dict like the stitch file, plus checks."""
    from torch.profiler import ProfilerActivity, profile
    from bench_train import WRAPPERS, count_ops
    gpu = dev.type == "cuda"
    sync = torch.cuda.synchronize if gpu else None
    reps, budget = (5, 0.4) if quick else (20, 2.0)
    r, checks = {}, {}
    built = torch_cases(torch, checks, lambda f: f, dev)
    for c in cases:
        try:
            it = built[c]()  # builds the case and runs it once (the correctness check)
            warm = 3 if c in ("block", "mlp") else 2
            if gpu:
                # Profiled after the timing: CUPTI's start-up must not land in a timed call.
                med, best, n, pipe = time_iters(it, reps, budget, warm, sync=sync)
                with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                    it()
                    sync()
                kern, mem, by_name = count_cuda_kernels(prof)
                r.update({c + "_pipe_ms": pipe, c + "_memops": mem})
                if kern + mem == 0:  # every case launches something: this torch's events are not CUDA-typed
                    kern = None
                names = "%d memcpy/memset; " % mem + ", ".join(
                    "%s %d" % kv for kv in sorted(by_name.items(), key=lambda kv: -kv[1])[:8])
            else:
                prof = profile(activities=[ProfilerActivity.CPU], record_shapes=True)

                def profiled(f):
                    with prof:
                        f()
                med, best, n, pipe = time_iters(it, reps, budget, warm, profiled)
                kern, kern_all, events, by_name = count_ops(prof, 1, WRAPPERS | EXTRA_SKIP)
                names = ", ".join("%s %g" % (k[6:], v)
                                  for k, v in sorted(by_name.items(), key=lambda kv: -kv[1]))
            r.update({c + "_ms": med, c + "_best_ms": best, c + "_n": n})
            if kern is not None:
                r[c + "_kernels"] = kern
            print("  torch  %-13s %9.3f ms median (best %.3f, %d iters%s), %s kernels/iter (%s)" % (
                c, med, best, n, "; %.3f pipelined" % pipe if pipe is not None else "",
                fmt(kern, "%5.1f"), names if kern is not None else "the profiler recorded no CUDA events"))
        except Exception as e:  # noqa: BLE001 (report and go on with the other cases)
            print("  torch  %-13s FAILED: %s" % (c, e))
    if hasattr(torch, "compile"):
        comp_checks = {}
        built = torch_cases(torch, comp_checks, torch.compile, dev)
        for c in cases:
            try:
                it = built[c]()
                med, best, n, pipe = time_iters(it, reps, budget, 3, sync=sync)
                r[c + "_compile_ms"] = med
                if pipe is not None:
                    r[c + "_compile_pipe_ms"] = pipe
                print("  torch.compile %-13s %9.3f ms median (best %.3f, %d iters%s)" % (
                    c, med, best, n, "; %.3f pipelined" % pipe if pipe is not None else ""))
            except Exception as e:  # noqa: BLE001
                print("  torch.compile %-13s n/a: %s" % (c, str(e).splitlines()[0] if str(e) else type(e).__name__))
    return r, checks


# ---------------------------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------------------------

def run_stitch(build, out, quick, cases, fuse=None, device="cpu"):
    env = dict(os.environ)
    env["ST_DEVICE"] = device
    env["ST_JIT_ASYNC"] = "0"   # timed iterations run compiled kernels, not the interpreter meanwhile
    if fuse is not None:
        env["ST_FUSE"] = fuse
    else:
        env.pop("ST_FUSE", None)
    args = [os.path.join(build, "stitch"), os.path.join(HERE, "bench_fusion.lua"), out,
            "--cases=" + ",".join(cases)] + (["--quick"] if quick else []) + \
        (["--device=cuda"] if device == "cuda" else [])
    try:
        p = subprocess.run(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    except OSError as e:
        return "  stitch: cannot run %s (%s): build it with make\n" % (args[0], e), {}
    if p.returncode != 0:
        print("  stitch exited with status %d" % p.returncode)
    return p.stdout, load([out])


PEERS = [("jax", "jax.jit"), ("tinygrad", "tinygrad TinyJit")]


def run_peers(cases, quick, threads, tmp):
    """{peer: result dict} of the optional peers (bench_fusion_peers.py, one child process each, this
    Python): a peer that cannot be imported prints "<peer>: not installed (...)" and gets {}."""
    out = {}
    for peer, _ in PEERS:
        path = os.path.join(tmp, "peer_%s.txt" % peer)
        args = [sys.executable, os.path.join(HERE, "bench_fusion_peers.py"), "--peer=" + peer,
                "--threads=%d" % threads, "--out=" + path, "--cases=" + ",".join(cases)] + \
            (["--quick"] if quick else [])
        sys.stdout.flush()
        try:
            p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            text, rc = p.stdout, p.returncode
        except OSError as e:
            text, rc = "%s: not run (%s)\n" % (peer, e), 1
        # peers print warnings of their own on stderr (XLA, tinygrad): keep our lines and errors
        lines = [ln for ln in text.splitlines() if ln.startswith(("  ", peer + ":")) or "Error" in ln]
        print("\n".join(lines[-40:]))
        if rc not in (0, 3):
            print("  %s exited with status %d" % (peer, rc))
        out[peer] = load([path]) if rc == 0 else {}
    return out


def print_peer_table(s, t, peers, cases):
    """stitch against every baseline of this run: times and stitch / baseline ratios."""
    print("== stitch vs every baseline of this run: median ms; ratio = stitch / baseline (< 1: stitch "
          "faster); a baseline's checksum mismatch against torch eager makes its ratio invalid ==")
    print("kernels per iteration: stitch and torch as above; jax = instructions of the compiled executable's "
          "ENTRY computation less parameters, constants, tuples and bitcasts (fusions, dots, copies: one "
          "thunk each); tinygrad = GlobalCounters.kernel_count over one TinyJit replay.")
    names = [n for _, n in PEERS]
    hdr = "| case | stitch ms | torch eager ms | torch.compile ms | %s | stitch/eager | stitch/compile | %s | " \
          "kernels stitch / eager / %s | checks %s |" % (
              " | ".join(n + " ms" for n in names), " | ".join("stitch/" + n.split()[0] for n in names),
              " / ".join(p for p, _ in PEERS), ", ".join(p for p, _ in PEERS))
    print(hdr)
    print("|" + "---|" * (hdr.count("|") - 1))
    for c in cases:
        sm = s.get(c + "_ms")
        sbad = compare(s, t, c)

        def ratio(b, bad):
            if sbad or bad:
                return "invalid"
            return "%.2fx" % (sm / b) if sm and b else "n/a"
        base = [(t.get(c + "_ms"), None), (t.get(c + "_compile_ms"), None)]
        chks = []
        for peer, _ in PEERS:
            r = peers.get(peer, {})
            cell, bad = check_cell(r, t, c, peer) if r else ("n/a", None)
            chks.append(cell)
            base.append((r.get(c + "_ms"), bad))
        kern = [s.get(c + "_kernels"), t.get(c + "_kernels")] + [peers.get(p, {}).get(c + "_kernels") for p, _ in PEERS]
        print("| %s | %s | %s | %s | %s | %s |" % (
            label(c, "cpu"), fmt(sm), " | ".join(fmt(b) for b, _ in base),
            " | ".join(ratio(b, bad) for b, bad in base), " / ".join(fmt(k, "%.0f") for k in kern), ", ".join(chks)))


def compare(s, t, case, who="stitch"):
    """Mismatching checksum lines of one case (empty: ok); None when a side has no checks. s: the
    side checked (stitch or a peer, named who), t: torch eager's checks."""
    keys = sorted(k for k in t if k.startswith("chk_%s_" % case))
    if not keys or not any(k in s for k in keys):
        return None
    bad = []
    for k in keys:
        sv, tv = s.get(k), t[k]
        if sv is None:
            bad.append("%s missing" % k)
            continue
        if k.endswith("_w"):  # weighted sum: tolerance relative to the L1 norm of y
            tol = 2e-3 * abs(t.get(k[:-2] + "_l1", abs(tv))) + 1e-6
        else:
            tol = 2e-3 * abs(tv) + 1e-6
        if not abs(sv - tv) <= tol:
            bad.append("%s %s %.6g torch %.6g" % (k, who, sv, tv))
    return bad


def adamw_numel(C):
    """Floats in the 14 parameters of the C = V block (the adamw case)."""
    n, V = 0, C
    for fan_in, fan_out in [(C, 3 * C), (C, C), (C, 4 * C), (4 * C, C), (C, V)]:
        n += fan_in * fan_out + fan_out
    return n + 4 * C  # two LayerNorms


def min_bytes(device):
    """{case: (bytes, what)}: the minimal traffic of the memory-bound cases at SIZES[device], every
    input read once and every output written once (f32 = 4 B, the i64 targets 8 B; nothing
    re-read, no saved intermediates)."""
    f4, i8 = 4, 8
    R, ac = SIZES[device]
    C = 1024  # the columns of layernorm and cross-entropy (softmax: 4096)
    n = adamw_numel(ac)
    return {
        # read x, write y
        "softmax": (2 * R * 4096 * f4, "read x, write y"),
        # read x, w, b; write y
        "layernorm_fwd": ((2 * R * C + 2 * C) * f4, "read x, w, b; write y"),
        # read x, dy, w, b; write y, dx, dw, db
        "layernorm": ((4 * R * C + 4 * C) * f4, "read x, dy, w, b; write y, dx, dw, db"),
        # read logits and targets; write the loss and dlogits
        "cross_entropy": ((2 * R * C + 1) * f4 + R * i8, "read logits, targets; write loss, dlogits"),
        # read p, g, m, v; write p, m, v
        "adamw": (7 * n * f4, "read p, g, m, v; write p, m, v"),
    }


def case_flops():
    """{case: FLOPs} of the compute-bound cases (GEMMs only; backward = 2x forward)."""
    B, T, Cb, Vb = 16, 64, 128, 256  # 4 heads: attention FLOPs do not depend on them
    fwd_block = 2 * B * T * (Cb * 3 * Cb + Cb * Cb + 2 * Cb * 4 * Cb + Cb * Vb) + 2 * 2 * B * T * T * Cb
    fwd_mlp = 2 * 128 * (784 * 256 + 256 * 128 + 128 * 10)
    return {"linear_gelu": 2 * 4096 * 1024 * 1024, "block": 3 * fwd_block, "mlp": 3 * fwd_mlp}


def floors(threads, bw_gbs):
    """{case: (floor ms, what)}: bytes / bandwidth for the memory-bound cases, FLOPs / GEMM rate else."""
    gemm = GEMM_GFLOPS.get(threads, GEMM_GFLOPS[2]) * 1e9
    out = {c: (b / (bw_gbs * 1e9) * 1e3, "%.1f MB" % (b / 1e6)) for c, (b, _) in min_bytes("cpu").items()}
    for c, fl in case_flops().items():
        out[c] = (fl / gemm * 1e3, "%.2f GFLOP" % (fl / 1e9))
    return out


def measure_bw_cuda(torch):
    """GB/s of torch's y.copy_(x) of COPY_BYTES f32 on the GPU (read + write counted): device time
    from CUDA events around each copy, best of 10 after 3 warm-up copies. The memory is returned
    to the driver afterwards (stitch runs in another process)."""
    x = torch.ones(COPY_BYTES // 4, device="cuda")
    y = torch.empty_like(x)
    for _ in range(3):
        y.copy_(x)
    best = None
    for _ in range(10):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        y.copy_(x)
        b.record()
        b.synchronize()
        ms = a.elapsed_time(b)
        best = ms if best is None else min(best, ms)
    del x, y
    torch.cuda.empty_cache()
    return 2 * COPY_BYTES / (best * 1e-3) / 1e9


def measure_bw(torch):
    """GB/s of torch's copy_ of 64 MiB f32 (read + write counted), best of 10, this thread count."""
    src = torch.ones(16 << 20)
    dst = torch.empty_like(src)
    dst.copy_(src)
    best = min(_timed(lambda: dst.copy_(src)) for _ in range(10))
    return 2 * src.numel() * 4 / best / 1e9


def _timed(f):
    a = time.perf_counter()
    f()
    return time.perf_counter() - a


def fmt(v, f="%.3f"):
    return "n/a" if v is None else f % v


def print_cpu_table(s, t, cases, threads, bw):
    """The CPU results table: times, floors at the measured copy bandwidth or GEMM rate, kernels."""
    fl = floors(threads, bw)
    print("== results: median ms per iteration (best in parentheses), same run, %d threads ==" % threads)
    print(KERNEL_RULE + ".")
    hdr = "| case | stitch ms | torch eager ms | stitch/eager | torch.compile ms | floor ms (what) | stitch % of floor | " \
          "kernels stitch | kernels torch | kernels ratio | check |"
    print(hdr)
    print("|" + "---|" * (hdr.count("|") - 1))
    for c in cases:
        sm, tm = s.get(c + "_ms"), t.get(c + "_ms")
        sk, tk = s.get(c + "_kernels"), t.get(c + "_kernels")
        chk, bad = check_cell(s, t, c)
        ratio = "%.2fx" % (sm / tm) if sm and tm and not bad else ("invalid" if bad else "n/a")
        floor, what = fl.get(c, (None, ""))
        print("| %s | %s (%s) | %s (%s) | %s | %s | %s (%s) | %s | %s | %s | %s | %s |" % (
            label(c, "cpu"), fmt(sm), fmt(s.get(c + "_best_ms")), fmt(tm), fmt(t.get(c + "_best_ms")), ratio,
            fmt(t.get(c + "_compile_ms")), fmt(floor), what,
            "%.0f%%" % (100 * floor / sm) if floor and sm else "n/a",
            fmt(sk, "%.1f"), fmt(tk, "%.1f"), kernel_ratio(sk, tk), chk))
    kernel_goals(s, t, cases)


def check_cell(s, t, c, who="stitch"):
    """(table cell, list of mismatches or None) of case c's checksums."""
    bad = compare(s, t, c, who)
    return ("n/a" if bad is None else ("ok" if not bad else "FAILED: " + "; ".join(bad[:3]))), bad


def kernel_ratio(sk, tk):
    return "%.2fx" % (sk / tk) if sk is not None and tk else "n/a"


def kernel_goals(s, t, cases):
    for c in ("mlp", "block"):
        sk, tk = s.get(c + "_kernels"), t.get(c + "_kernels")
        if c in cases and sk is not None and tk:
            print("goal kernels per training step <= 0.4x eager (%s): %.2fx %s" % (
                c, sk / tk, "met" if sk / tk <= 0.4 else "MISSED"))


def print_gpu_tables(s, t, cases, copy_gbs):
    """The GPU tables: times (synced median, best, pipelined) and kernels; then, for the
    memory-bound cases, min_bytes() / time as a fraction of the device copy; GEMM cases' TFLOP/s."""
    print("== results on the GPU: median ms per iteration, each ending with a device sync (best; "
          "pipelined = back to back, one sync) ==")
    print("kernels: stitch = st.stats().kernels_launched per iteration; torch = CUDA kernel events of one "
          "profiled iteration (memcpy/memset events in parentheses, not counted).")
    hdr = "| case | stitch ms (best; pipelined) | torch eager ms (best; pipelined) | stitch/eager | " \
          "torch.compile ms (pipelined) | stitch/compile | kernels stitch | kernels torch | kernels ratio | check |"
    print(hdr)
    print("|" + "---|" * (hdr.count("|") - 1))
    for c in cases:
        sm, tm, cm = s.get(c + "_ms"), t.get(c + "_ms"), t.get(c + "_compile_ms")
        sk, tk = s.get(c + "_kernels"), t.get(c + "_kernels")
        chk, bad = check_cell(s, t, c)

        def ratio(a, b):
            return "%.2fx" % (a / b) if a and b and not bad else ("invalid" if bad else "n/a")
        print("| %s | %s (%s; %s) | %s (%s; %s) | %s | %s (%s) | %s | %s | %s (%s) | %s | %s |" % (
            label(c, "cuda"), fmt(sm), fmt(s.get(c + "_best_ms")), fmt(s.get(c + "_pipe_ms")), fmt(tm),
            fmt(t.get(c + "_best_ms")), fmt(t.get(c + "_pipe_ms")), ratio(sm, tm), fmt(cm),
            fmt(t.get(c + "_compile_pipe_ms")), ratio(sm, cm), fmt(sk, "%.1f"), fmt(tk, "%.0f"),
            fmt(t.get(c + "_memops"), "%.0f"), kernel_ratio(sk, tk), chk))
    kernel_goals(s, t, cases)

    print()
    print("== memory-bound cases: minimal bytes / time as a fraction of the device copy (%.0f GB/s): "
          "median synced (pipelined) ==" % copy_gbs)
    hdr = "| case | min bytes (what) | floor ms at the copy's rate | stitch % copy | eager % copy | " \
          "compile % copy | goal stitch >= 80% (pipelined) |"
    print(hdr)
    print("|" + "---|" * (hdr.count("|") - 1))
    mb = min_bytes("cuda")

    def pct(nbytes, ms):
        return None if not ms else 100 * nbytes / (ms * 1e-3) / (copy_gbs * 1e9)

    def cell(nbytes, r, key):
        a, b = pct(nbytes, r.get(key + "_ms")), pct(nbytes, r.get(key + "_pipe_ms"))
        return "%s (%s)" % (fmt(a, "%.0f%%"), fmt(b, "%.0f%%"))
    for c in [c for c in MEM_BOUND if c in cases]:
        nbytes, what = mb[c]
        bad = compare(s, t, c)
        goal = pct(nbytes, s.get(c + "_pipe_ms"))
        print("| %s | %.1f MB (%s) | %.4f | %s | %s | %s | %s |" % (
            label(c, "cuda"), nbytes / 1e6, what, nbytes / (copy_gbs * 1e9) * 1e3, cell(nbytes, s, c),
            cell(nbytes, t, c), cell(nbytes, t, c + "_compile"),
            "n/a" if goal is None else ("invalid (check)" if bad else
                                        "%s (%.0f%%)" % ("met" if goal >= 80 else "MISSED", goal))))
    for c, fl in case_flops().items():
        if c in cases:
            rates = ["%s %s" % (who, fmt(fl / (r[k] * 1e-3) / 1e12 if r.get(k) else None, "%.2f"))
                     for who, r, k in [("stitch", s, c + "_ms"), ("eager", t, c + "_ms"),
                                       ("compile", t, c + "_compile_ms")]]
            print("compute %s: %.2f GFLOP of GEMMs; TFLOP/s (median synced): %s" % (
                c, fl / 1e9, ", ".join(rates)))


def print_ablation(abl, t, cases):
    print("== ST_FUSE ablation: median ms (kernels per iteration); quick iteration counts ==")
    print("| ST_FUSE | " + " | ".join(cases) + " | checks |")
    print("|" + "---|" * (len(cases) + 2))
    for setting, r in abl.items():
        cells = []
        for c in cases:
            cells.append("%s (%s)" % (fmt(r.get(c + "_ms"), "%.2f"), fmt(r.get(c + "_kernels"), "%.0f"))
                         if c + "_ms" in r else "failed")
        fails = [c for c in cases if compare(r, t, c)]
        print("| %s | %s | %s |" % (setting or "(all on)", " | ".join(cells),
                                    "ok" if not fails else "FAILED: " + ",".join(fails)))


def parse_args(args):
    """(quick, ablate, cases, build dir, device) from the command line."""
    quick = "--quick" in args
    ablate = "--no-ablation" not in args
    cases, device = CASES, "cpu"
    build = os.path.join(HERE, "..", "build")
    for i, a in enumerate(args):
        if a.startswith("--cases="):
            cases = [c for c in a[8:].split(",") if c in CASES]
        if a == "--build" and i + 1 < len(args):
            build = args[i + 1]
        if a == "--device" and i + 1 < len(args):
            device = args[i + 1]
        if a.startswith("--device="):
            device = a[9:]
    return quick, ablate, cases, os.path.abspath(build), device


def main():
    quick, ablate, cases, build, device = parse_args(sys.argv[1:])
    use_peers = "--no-peers" not in sys.argv[1:]
    if device not in ("cpu", "cuda"):
        print("bench_fusion.py: --device must be cpu or cuda, not %r" % device)
        return 2
    gpu = device == "cuda"
    threads = os.environ.get("ST_THREADS", "")
    threads = int(threads) if threads.isdigit() and int(threads) > 0 else os.cpu_count()
    os.environ["ST_THREADS"] = str(threads)
    for k in ("ST_EAGER", "ST_DEBUG", "ST_POISON"):
        os.environ.pop(k, None)
    try:
        import torch
    except Exception as e:  # noqa: BLE001
        print("torch not importable (%s): run with /usr/bin/python3 (python3-torch)" % e)
        return 1
    if gpu and not torch.cuda.is_available():
        print("no CUDA device: torch %s sees none (torch.cuda.is_available() is False; built with CUDA %s); "
              "GPU fusion benchmarks skipped" % (torch.__version__, torch.version.cuda or "none"))
        return 0
    tmp = tempfile.mkdtemp(prefix="bench_fusion.")
    os.environ["ST_CACHE_DIR"] = os.path.join(tmp, "cache")
    torch.set_num_threads(threads)
    model = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    print("machine: %d cores, %s; %s" % (os.cpu_count(), model, time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime())))
    print("threads: %d (ST_THREADS; torch.set_num_threads(%d)), OMP_WAIT_POLICY=%s; torch %s; torch.compile: %s" % (
        threads, torch.get_num_threads(), os.environ.get("OMP_WAIT_POLICY", "unset (libgomp's default)"), torch.__version__,
        "available" if hasattr(torch, "compile") else "not in this torch (added in 2.0): n/a"))
    print("load average at start: %s" % " ".join(open("/proc/loadavg").read().split()[:3]))
    if gpu:
        bw = measure_bw_cuda(torch)
        print("device: %s, CUDA %s; copy: torch y.copy_(x) of %d MiB f32, best of 10 (CUDA events): %.1f GB/s "
              "(read + write), the fractions' divisor" % (torch.cuda.get_device_name(0), torch.version.cuda,
                                                          COPY_BYTES >> 20, bw))
    else:
        bw = measure_bw(torch)
        print("bandwidth: torch copy_ of 64 MiB f32, %d threads: %.1f GB/s (read + write), the floors' divisor" % (
            threads, bw))
    t_start = time.time()

    print("== stitch (%s%s) ==" % ("quick" if quick else "full", ", ST_DEVICE=cuda" if gpu else ""))
    text, s = run_stitch(build, os.path.join(tmp, "stitch.txt"), quick, cases, device=device)
    sys.stdout.write(text)
    print("== PyTorch eager%s ==" % (" (cuda)" if gpu else ""))
    t, checks = run_torch(torch, cases, quick, torch.device(device))
    t.update(checks)
    peers = {}
    if not gpu and use_peers:
        print("== optional peers (each in a child process; n/a where not installed) ==")
        peers = run_peers(cases, quick, threads, tmp)

    abl = {}
    if ablate:
        print("== ST_FUSE ablation (stitch, quick iteration counts) ==")
        for setting in (ABLATION[:1] + ABLATION[-1:]) if quick else ABLATION:
            out = os.path.join(tmp, "abl%d.txt" % len(abl))
            text, r = run_stitch(build, out, True, cases, setting, device)
            abl[setting] = r
            warn = [ln for ln in text.splitlines() if "ST_FUSE" in ln or "FAILED" in ln]
            print("  ST_FUSE=%-12s done%s" % (setting or "(all)", ("; " + "; ".join(sorted(set(warn)))) if warn else ""))
    print("load average at end: %s (%.0f s)" % (" ".join(open("/proc/loadavg").read().split()[:3]),
                                                time.time() - t_start))
    print()
    if gpu:
        print_gpu_tables(s, t, cases, bw)
    else:
        print_cpu_table(s, t, cases, threads, bw)
        if use_peers:
            print()
            print_peer_table(s, t, peers, cases)
    if abl:
        print()
        print_ablation(abl, t, cases)
    shutil.rmtree(tmp, ignore_errors=True)
    if gpu and "cuda_skipped" in s:
        print("stitch saw no CUDA device (its line above) while torch did: stitch columns n/a; exit status 1")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
