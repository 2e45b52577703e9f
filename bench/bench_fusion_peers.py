"""bench_fusion_peers.py — the optional peers of bench_fusion.py (issue 15): JAX (jax.jit, XLA on
the CPU) and tinygrad (TinyJit, its CPU device) twins of bench_fusion.lua's cases.

Run by bench_fusion.py, once per peer, in a child process of its own:
    python3 bench/bench_fusion_peers.py --peer=jax|tinygrad --threads=N --out=FILE [--quick] [--cases=a,b]
The child writes `key value` lines (case_ms, case_best_ms, case_n, chk_* checksums) to FILE, as
bench_fusion.lua does, and prints one line per case. Exit status 3 with one line "<peer>: not
installed (...)" when the peer (or numpy, which builds its inputs) cannot be imported: the driver
then shows n/a.

Why a child: each peer's thread pools and environment are fixed when it is imported (XLA_FLAGS,
tinygrad's NUM_CPU_THREADS and DEV), and its threads must not share the process that times torch.
Threads: N = bench_fusion's thread count (ST_THREADS, torch.set_num_threads). The child's CPU
affinity is set to N CPUs when N is below the CPU count (os.sched_setaffinity): XLA's CPU client
sizes its Eigen pool from the CPUs it may run on (checked: 1 "tf_XLAEigen" thread under a 1-CPU
mask, 2 under 2) and jax has no option for a count; for N = 1 XLA_FLAGS also gets
--xla_cpu_multi_thread_eigen=false (XLA's own single-thread switch for its Eigen calls).
tinygrad: DEV=CPU (its CPU device: C compiled by clang, run by worker threads), NUM_CPU_THREADS=N
(the most threads a kernel is split over).

Inputs: numpy builds bench_fusion.lua's integer pattern in int64 and divides in float32, bit for
bit what the torch twins (bench_fusion.torch_cases) make; parameters in torch's named_parameters
order with the same init rule. Checksums are the torch twins' (sum(y * w), sum(|y|) in float64),
compared by the driver against torch eager's with the stitch tolerance. Timing: bench_fusion's
time_iters (check call, first call and warm-up excluded, median); every timed call waits for its
results (jax.block_until_ready; tinygrad: realize, then the device's synchronize).

What each step is: JAX: one jax.jit of the whole step (value_and_grad of the loss, then Adam/AdamW
written in jax.numpy with torch's formulas; the bias corrections computed on the host in double as
torch does, passed as scalars; parameter and moment buffers donated). tinygrad: one TinyJit of
zero_grad, forward, backward and tinygrad.nn.optim.Adam/AdamW (the same update as torch's:
lr * (m_hat / (sqrt(v_hat) + eps) + wd * p)). GELU is the exact (erf) form in both (tinygrad
evaluates erf with a 1.5e-7 polynomial).

Kernels per iteration (counted once after the timing): JAX = hlo_kernels() of the compiled
executable (ENTRY instructions less parameters, constants, tuples, bitcasts: one thunk each);
tinygrad = GlobalCounters.kernel_count over one TinyJit replay.
"""
import math
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = ["softmax", "layernorm_fwd", "layernorm", "cross_entropy", "adamw", "linear_gelu", "block", "mlp"]
R, AC = 4096, 512  # bench_fusion.SIZES["cpu"]
LR, WD, B1, B2, EPS = 1e-3, 1e-2, 0.9, 0.999, 1e-8


def prod(shape):
    n = 1
    for d in shape:
        n *= d
    return n


class Inputs:
    """bench_fusion.lua's pattern and the torch twins' inputs and parameters, in numpy float32."""

    def __init__(self, np):
        self.np = np

    def pattern(self, shape, seed):
        np = self.np
        i = np.arange(prod(shape), dtype=np.int64)
        v = ((i * 7919 + seed * 104729) % 10007).astype(np.float32) / np.float32(10007.0) - np.float32(0.5)
        return v.reshape(shape)

    def inp(self, shape, seed, scale=1.0):
        return self.pattern(shape, seed) * self.np.float32(scale)

    def params(self, specs):
        """[(name, shape)] in named_parameters order -> numpy arrays (bench_fusion's init_params)."""
        np, out = self.np, []
        for i, (name, s) in enumerate(specs):
            p = self.pattern(s, 100 + i)
            if len(s) == 2:
                v = p * np.float32(2 / math.sqrt(s[1]))
            elif name.startswith("ln") and name.endswith("weight"):
                v = p * np.float32(0.2) + np.float32(1)
            else:
                v = p * np.float32(0.2)
            out.append(v)
        return out

    def checksum(self, checks, case, name, y):
        np = self.np
        y = np.asarray(y).astype(np.float64)
        w = self.pattern(list(y.shape), 7).astype(np.float64)
        checks["chk_%s_%s_w" % (case, name)] = float((y * w).sum())
        checks["chk_%s_%s_l1" % (case, name)] = float(np.abs(y).sum())

    def targets(self, n, classes):
        return ((self.np.arange(n, dtype=self.np.int64) * 31 + 7) % classes).astype(self.np.int32)


def block_specs(C, V):
    return [("ln1.weight", (C,)), ("ln1.bias", (C,)), ("qkv.weight", (3 * C, C)), ("qkv.bias", (3 * C,)),
            ("proj.weight", (C, C)), ("proj.bias", (C,)), ("ln2.weight", (C,)), ("ln2.bias", (C,)),
            ("fc1.weight", (4 * C, C)), ("fc1.bias", (4 * C,)), ("fc2.weight", (C, 4 * C)), ("fc2.bias", (C,)),
            ("head.weight", (V, C)), ("head.bias", (V,))]


MLP_SPECS = [("0.weight", (256, 784)), ("0.bias", (256,)), ("2.weight", (128, 256)), ("2.bias", (128,)),
             ("4.weight", (10, 128)), ("4.bias", (10,))]
BLOCK = (16, 64, 128, 4, 256)  # B, T, C, H, V


def bias_corr(t):
    """torch.optim.Adam(W)'s per-step scalars (host doubles): step size, sqrt of bias correction 2."""
    return LR / (1 - B1 ** t), math.sqrt(1 - B2 ** t)


# ---------------------------------------------------------------------------------------------
# JAX
# ---------------------------------------------------------------------------------------------

HLO_NO_KERNEL = {"parameter", "constant", "tuple", "get-tuple-element", "bitcast"}


def hlo_kernels(text):
    """Kernels of a compiled XLA executable: the instructions of its ENTRY computation (each a
    fusion, dot, copy, custom call ... that XLA's CPU runtime runs as one thunk) except parameters,
    constants, tuples and bitcasts (no data moved). Nested computations are fusion bodies."""
    import re
    entry = text[text.index("\nENTRY"):]
    entry = entry[:entry.index("\n}")]
    n = 0
    for line in entry.splitlines()[1:]:
        if " = " not in line:
            continue
        m = re.search(r"\s([a-z][a-z0-9-]*)\(", line.split(" = ", 1)[1])
        if m and m.group(1) not in HLO_NO_KERNEL:
            n += 1
    return n


def jax_cases(jax, np, checks):
    """{case: setup -> iter}; each iter waits for its results (block_until_ready)."""
    jnp = jax.numpy
    I = Inputs(np)
    put = jnp.asarray

    def ln(x, w, b):
        mu = x.mean(-1, keepdims=True)
        xc = x - mu
        var = (xc * xc).mean(-1, keepdims=True)
        return xc * jax.lax.rsqrt(var + 1e-5) * w + b

    def xent(logits, target):
        lse = jax.nn.logsumexp(logits, axis=-1)
        return (lse - jnp.take_along_axis(logits, target[:, None], axis=-1)[:, 0]).mean()

    def ready(f, fn, args):
        """The timed call (waits for its results); .kernels() counts fn's executable at args()."""
        def run():
            return jax.block_until_ready(f())
        run.kernels = lambda: hlo_kernels(fn.lower(*args()).compile().as_text())
        return run

    def adam_update(p, g, m, v, step_size, bc2s, decay):
        m = B1 * m + (1 - B1) * g
        v = B2 * v + (1 - B2) * (g * g)
        return p * decay - step_size * m / (jnp.sqrt(v) / bc2s + EPS), m, v

    def softmax():
        x = put(I.inp([R, 4096], 1, 8))
        f = jax.jit(lambda x: jax.nn.softmax(x, axis=-1))
        I.checksum(checks, "softmax", "y", f(x))
        return ready(lambda: f(x), f, lambda: (x,))

    def layernorm_fwd():
        x = put(I.inp([R, 1024], 1, 4))
        w, b = put(I.inp([1024], 2, 0.4) + np.float32(1)), put(I.inp([1024], 3))
        f = jax.jit(ln)
        I.checksum(checks, "layernorm_fwd", "y", f(x, w, b))
        return ready(lambda: f(x, w, b), f, lambda: (x, w, b))

    def layernorm():
        x = put(I.inp([R, 1024], 1, 4))
        w, b = put(I.inp([1024], 2, 0.4) + np.float32(1)), put(I.inp([1024], 3))
        dy = put(I.inp([R, 1024], 4))

        @jax.jit
        def f(x, w, b, dy):
            y, vjp = jax.vjp(ln, x, w, b)
            return (y,) + vjp(dy)
        for n, t in zip(["y", "dx", "dw", "db"], f(x, w, b, dy)):
            I.checksum(checks, "layernorm", n, t)
        return ready(lambda: f(x, w, b, dy), f, lambda: (x, w, b, dy))

    def cross_entropy():
        logits = put(I.inp([R, 1024], 1, 8))
        target = put(I.targets(R, 1024))
        f = jax.jit(jax.value_and_grad(xent))
        loss, dx = f(logits, target)
        checks["chk_cross_entropy_loss"] = float(loss)
        I.checksum(checks, "cross_entropy", "dx", dx)
        return ready(lambda: f(logits, target), f, lambda: (logits, target))

    def adamw():
        ps = [put(p) for p in I.params(block_specs(AC, AC))]
        gs = [put(I.inp(list(p.shape), 201 + i, 0.01)) for i, p in enumerate(ps)]
        st = {"p": ps, "m": [jnp.zeros_like(p) for p in ps], "v": [jnp.zeros_like(p) for p in ps], "t": 0}

        def upd_all(ps, ms, vs, gs, step_size, bc2s):
            out = [adam_update(p, g, m, v, step_size, bc2s, 1 - LR * WD) for p, g, m, v in zip(ps, gs, ms, vs)]
            return [o[0] for o in out], [o[1] for o in out], [o[2] for o in out]
        upd = jax.jit(upd_all, donate_argnums=(0, 1, 2))

        def step():
            st["t"] += 1
            st["p"], st["m"], st["v"] = upd(st["p"], st["m"], st["v"], gs, *bias_corr(st["t"]))
            return st["p"]
        step()
        step()
        for name, i in [("p1", 0), ("p3", 2), ("p9", 8)]:
            I.checksum(checks, "adamw", name, st["p"][i])
        return ready(step, upd, lambda: (st["p"], st["m"], st["v"], gs) + bias_corr(st["t"]))

    def linear_gelu():
        x = put(I.inp([4096, 1024], 1))
        w, b = put(I.inp([1024, 1024], 2, 1 / 16)), put(I.inp([1024], 3, 0.2))
        f = jax.jit(lambda x, w, b: jax.nn.gelu(x @ w.T + b, approximate=False))
        I.checksum(checks, "linear_gelu", "y", f(x, w, b))
        return ready(lambda: f(x, w, b), f, lambda: (x, w, b))

    def train(case, specs, loss_fn, x, target, decay):
        ps = [put(p) for p in I.params(specs)]
        lg = jax.jit(jax.value_and_grad(loss_fn))
        loss, gs = lg(ps, x, target)
        checks["chk_%s_loss1" % case] = float(loss)
        for i, g in enumerate(gs):
            if i % 2 == 0:
                I.checksum(checks, case, "g%d" % (i + 1), g)

        def whole(ps, ms, vs, x, target, step_size, bc2s):
            loss, gs = jax.value_and_grad(loss_fn)(ps, x, target)
            out = [adam_update(p, g, m, v, step_size, bc2s, decay) for p, g, m, v in zip(ps, gs, ms, vs)]
            return loss, [o[0] for o in out], [o[1] for o in out], [o[2] for o in out]
        f = jax.jit(whole, donate_argnums=(0, 1, 2))
        st = {"p": ps, "m": [jnp.zeros_like(p) for p in ps], "v": [jnp.zeros_like(p) for p in ps], "t": 0}

        def step():
            st["t"] += 1
            loss, st["p"], st["m"], st["v"] = f(st["p"], st["m"], st["v"], x, target, *bias_corr(st["t"]))
            return loss, st["p"]
        step()
        checks["chk_%s_loss2" % case] = float(step()[0])
        return ready(step, f, lambda: (st["p"], st["m"], st["v"], x, target) + bias_corr(st["t"]))

    def block():
        B, T, C, H, V = BLOCK
        D = C // H
        keep = put(np.arange(T).reshape(T, 1) >= np.arange(T).reshape(1, T))

        def loss_fn(p, x, target):
            q, k, v = [t.reshape(B, T, H, D).transpose(0, 2, 1, 3)
                       for t in jnp.split(ln(x, p[0], p[1]) @ p[2].T + p[3], 3, axis=2)]
            att = jax.nn.softmax(jnp.where(keep, (q @ k.swapaxes(-2, -1)) * (1 / math.sqrt(D)), -jnp.inf), axis=-1)
            x = x + (att @ v).transpose(0, 2, 1, 3).reshape(B, T, C) @ p[4].T + p[5]
            x = x + jax.nn.gelu(ln(x, p[6], p[7]) @ p[8].T + p[9], approximate=False) @ p[10].T + p[11]
            return xent((x @ p[12].T + p[13]).reshape(B * T, V), target)
        return train("block", block_specs(C, V), loss_fn, put(I.inp([B, T, C], 1)), put(I.targets(B * T, V)),
                     1 - LR * WD)

    def mlp():
        def loss_fn(p, x, target):
            h = jax.nn.relu(x @ p[0].T + p[1])
            h = jax.nn.relu(h @ p[2].T + p[3])
            return xent(h @ p[4].T + p[5], target)
        return train("mlp", MLP_SPECS, loss_fn, put(I.inp([128, 784], 1)), put(I.targets(128, 10)), 1.0)

    return {"softmax": softmax, "layernorm_fwd": layernorm_fwd, "layernorm": layernorm,
            "cross_entropy": cross_entropy, "adamw": adamw, "linear_gelu": linear_gelu, "block": block,
            "mlp": mlp}


# ---------------------------------------------------------------------------------------------
# tinygrad
# ---------------------------------------------------------------------------------------------

def tinygrad_cases(tg, np, checks):
    """{case: setup -> iter}; each iter is a TinyJit'd function whose outputs are realized, then
    the device synchronized."""
    Tensor, TinyJit, Device = tg.Tensor, tg.TinyJit, tg.Device
    from tinygrad.nn import optim
    I = Inputs(np)
    dev = Device[Device.DEFAULT]

    def put(a):
        return Tensor(a).realize()

    def ln(x, w, b):
        return x.layernorm(-1, 1e-5) * w + b

    def lin(x, w, b):
        return x.matmul(w.T) + b

    def ready(f):
        """The timed call (realized, then the device synchronized); .kernels() runs it once more
        and counts the kernels it launched (GlobalCounters.kernel_count: the TinyJit replay's)."""
        def run():
            out = f()
            dev.synchronize()
            return out

        def kernels():
            k0 = tg.GlobalCounters.kernel_count
            run()
            return tg.GlobalCounters.kernel_count - k0
        run.kernels = kernels
        return run

    def realized(*ts):
        Tensor.realize(*ts)
        return ts

    def softmax():
        x = put(I.inp([R, 4096], 1, 8))
        f = TinyJit(lambda x: realized(x.softmax(-1))[0])
        I.checksum(checks, "softmax", "y", f(x).numpy())
        return ready(lambda: f(x))

    def layernorm_fwd():
        x = put(I.inp([R, 1024], 1, 4))
        w, b = put(I.inp([1024], 2, 0.4) + np.float32(1)), put(I.inp([1024], 3))
        f = TinyJit(lambda x, w, b: realized(ln(x, w, b))[0])
        I.checksum(checks, "layernorm_fwd", "y", f(x, w, b).numpy())
        return ready(lambda: f(x, w, b))

    def layernorm():
        x = put(I.inp([R, 1024], 1, 4))
        w, b = put(I.inp([1024], 2, 0.4) + np.float32(1)), put(I.inp([1024], 3))
        dy = put(I.inp([R, 1024], 4))

        def fb(x, w, b, dy):
            y = ln(x, w, b)
            return realized(y, *y.gradient(x, w, b, gradient=dy))
        f = TinyJit(fb)
        for n, t in zip(["y", "dx", "dw", "db"], f(x, w, b, dy)):
            I.checksum(checks, "layernorm", n, t.numpy())
        return ready(lambda: f(x, w, b, dy))

    def cross_entropy():
        logits = put(I.inp([R, 1024], 1, 8))
        target = put(I.targets(R, 1024))

        def fb(logits, target):
            loss = logits.sparse_categorical_crossentropy(target)
            return realized(loss, *loss.gradient(logits))
        f = TinyJit(fb)
        loss, dx = f(logits, target)
        checks["chk_cross_entropy_loss"] = float(loss.item())
        I.checksum(checks, "cross_entropy", "dx", dx.numpy())
        return ready(lambda: f(logits, target))

    def adamw():
        ps = [put(p) for p in I.params(block_specs(AC, AC))]
        gs = [put(I.inp(list(p.shape), 201 + i, 0.01)) for i, p in enumerate(ps)]
        opt = optim.AdamW(ps, lr=LR, b1=B1, b2=B2, eps=EPS, weight_decay=WD)

        @TinyJit
        def step():
            for p, g in zip(ps, gs):
                p.grad = g
            opt.step()
            return ps[0]
        with tg.Context(TRAINING=1):
            step()
            step()
        for name, i in [("p1", 0), ("p3", 2), ("p9", 8)]:
            I.checksum(checks, "adamw", name, ps[i].numpy())

        def run():
            with tg.Context(TRAINING=1):
                return step()
        return ready(run)

    def linear_gelu():
        x = put(I.inp([4096, 1024], 1))
        w, b = put(I.inp([1024, 1024], 2, 1 / 16)), put(I.inp([1024], 3, 0.2))
        f = TinyJit(lambda x, w, b: realized(lin(x, w, b).gelu(approximate="none"))[0])
        I.checksum(checks, "linear_gelu", "y", f(x, w, b).numpy())
        return ready(lambda: f(x, w, b))

    def train(case, specs, fwd, x, target, wd):
        ps = [put(p) for p in I.params(specs)]

        def backward(loss):
            # the parameters' gradients only (Tensor.backward would also differentiate x)
            for p, g in zip(ps, loss.gradient(*ps)):
                p.grad = g
            return loss
        opt = (optim.AdamW(ps, lr=LR, b1=B1, b2=B2, eps=EPS, weight_decay=wd) if wd else
               optim.Adam(ps, lr=LR, b1=B1, b2=B2, eps=EPS))
        with tg.Context(TRAINING=1):
            loss = backward(fwd(ps, x).sparse_categorical_crossentropy(target))
            checks["chk_%s_loss1" % case] = float(loss.item())
            for i, p in enumerate(ps):
                if i % 2 == 0:
                    I.checksum(checks, case, "g%d" % (i + 1), p.grad.numpy())

        @TinyJit
        def step(x, target):
            loss = backward(fwd(ps, x).sparse_categorical_crossentropy(target))
            # one schedule with the update (beautiful_mnist's form): the loss of the old parameters
            return loss.realize(*opt.schedule_step())
        with tg.Context(TRAINING=1):
            # the loss1 step again (same parameters), then the step whose loss is loss2
            step(x, target)
            checks["chk_%s_loss2" % case] = float(step(x, target).item())

        def run():
            with tg.Context(TRAINING=1):
                return step(x, target)
        return ready(run)

    def block():
        B, T, C, H, V = BLOCK
        D = C // H
        keep = put(np.arange(T).reshape(T, 1) >= np.arange(T).reshape(1, T))

        def fwd(p, x):
            qkv = lin(ln(x, p[0], p[1]), p[2], p[3])
            q, k, v = [qkv[:, :, i * C:(i + 1) * C].reshape(B, T, H, D).transpose(1, 2) for i in range(3)]
            att = keep.where(q.matmul(k.transpose(-2, -1)) * (1 / math.sqrt(D)), -math.inf).softmax(-1)
            x = x + lin(att.matmul(v).transpose(1, 2).reshape(B, T, C), p[4], p[5])
            x = x + lin(lin(ln(x, p[6], p[7]), p[8], p[9]).gelu(approximate="none"), p[10], p[11])
            return lin(x, p[12], p[13]).reshape(B * T, V)
        return train("block", block_specs(C, V), fwd, put(I.inp([B, T, C], 1)), put(I.targets(B * T, V)), WD)

    def mlp():
        def fwd(p, x):
            return lin(lin(lin(x, p[0], p[1]).relu(), p[2], p[3]).relu(), p[4], p[5])
        return train("mlp", MLP_SPECS, fwd, put(I.inp([128, 784], 1)), put(I.targets(128, 10)), 0.0)

    return {"softmax": softmax, "layernorm_fwd": layernorm_fwd, "layernorm": layernorm,
            "cross_entropy": cross_entropy, "adamw": adamw, "linear_gelu": linear_gelu, "block": block,
            "mlp": mlp}


# ---------------------------------------------------------------------------------------------
# Child entry
# ---------------------------------------------------------------------------------------------

def setup_env(peer, threads):
    """Before the peer is imported: its thread count (module docstring)."""
    if threads < (os.cpu_count() or 1) and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:threads])
    if peer == "jax":
        os.environ["JAX_PLATFORMS"] = "cpu"
        if threads == 1:
            os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                                       " --xla_cpu_multi_thread_eigen=false").strip()
    else:
        os.environ["DEV"] = "CPU"
        os.environ["NUM_CPU_THREADS"] = str(threads)


def import_peer(peer):
    """(module, numpy, version string); raises ImportError with the reason."""
    import numpy as np
    if peer == "jax":
        import jax
        jax.config.update("jax_platforms", "cpu")
        return jax, np, "jax %s (jaxlib %s), XLA_FLAGS=%r, devices %s" % (
            jax.__version__, getattr(jax.lib, "__version__", "?") if hasattr(jax, "lib") else "?",
            os.environ.get("XLA_FLAGS", ""), ",".join(str(d) for d in jax.devices()))
    import tinygrad
    try:
        from importlib.metadata import version
        ver = version("tinygrad")
    except Exception:  # noqa: BLE001
        ver = "?"
    return tinygrad, np, "tinygrad %s, device %s, NUM_CPU_THREADS=%s" % (
        ver, tinygrad.Device.DEFAULT, os.environ.get("NUM_CPU_THREADS"))


def main(args):
    sys.path.insert(0, HERE)
    peer, threads, out, quick, cases = None, 1, None, "--quick" in args, CASES
    for a in args:
        if a.startswith("--peer="):
            peer = a[7:]
        elif a.startswith("--threads="):
            threads = int(a[10:])
        elif a.startswith("--out="):
            out = a[6:]
        elif a.startswith("--cases="):
            cases = [c for c in a[8:].split(",") if c in CASES]
    if peer not in ("jax", "tinygrad") or not out:
        print("usage: bench_fusion_peers.py --peer=jax|tinygrad --threads=N --out=FILE [--quick] [--cases=...]")
        return 2
    setup_env(peer, threads)
    try:
        mod, np, ver = import_peer(peer)
    except Exception as e:  # noqa: BLE001 (any import failure: the peer is absent)
        print("%s: not installed (%s)" % (peer, str(e).splitlines()[0] if str(e) else type(e).__name__))
        return 3
    from bench_fusion import time_iters  # the same timing rule as the torch twins
    print("  %s: %s; %d thread(s)" % (peer, ver, threads))
    reps, budget = (5, 0.4) if quick else (20, 2.0)
    checks, r = {}, {}
    built = (jax_cases if peer == "jax" else tinygrad_cases)(mod, np, checks)
    for c in cases:
        try:
            a = time.perf_counter()
            it = built[c]()  # builds the case, compiles it and runs the check
            first = (time.perf_counter() - a) * 1e3
            med, best, n, _ = time_iters(it, reps, budget, 3)
            r.update({c + "_ms": med, c + "_best_ms": best, c + "_n": n, c + "_setup_ms": first})
            try:
                kern = it.kernels()
                r[c + "_kernels"] = kern
            except Exception as e:  # noqa: BLE001 (a count is a bonus: keep the time)
                kern = "n/a (%s)" % type(e).__name__
            print("  %-8s %-13s %9.3f ms median (best %.3f, %d iters; build + compile + check %.0f ms), %s kernels/iter" % (
                peer, c, med, best, n, first, kern))
        except Exception as e:  # noqa: BLE001 (report and go on with the other cases)
            msg = str(e).splitlines()[0] if str(e) else type(e).__name__
            print("  %-8s %-13s FAILED: %s: %s" % (peer, c, type(e).__name__, msg[:300]))
    r.update(checks)
    with open(out, "w") as f:
        for k, v in r.items():
            f.write("%s %r\n" % (k, float(v)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
