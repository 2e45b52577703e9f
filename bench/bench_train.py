"""bench_train.py — the PyTorch twin of bench_train.lua: one MLP training step on the CPU (batch 128,
784-256-128-10 ReLU, cross_entropy mean, Adam lr 1e-3), 2 threads; and the comparison with stitch.

Run: /usr/bin/python3 bench/bench_train.py RESULTS_FILE [--quick] [--compare STITCH_RESULTS]
     python3 bench/bench_train.py --report TORCH_RESULTS STITCH_RESULTS...   (ratios only; no torch)
(bench/run.sh runs it right after bench_train.lua, in the same run, and prints the ratios with
--report in its ratio section.)

One timed step = opt.zero_grad(); loss = cross_entropy(model(x), y); loss.backward(); opt.step()
(no .item(): PyTorch on the CPU is synchronous, the step's work is done when opt.step() returns).
Warm-up steps, then STEPS timed one by one with perf_counter; the median is the figure.

Kernels per step (torch.profiler, CPU activity, record_shapes, over PROF_STEPS steps after the timed
ones). The profiler records every aten:: op call (including calls made inside other ops and by the
autograd engine). Its parent/child links are inferred from timestamps and are not reliable in torch
1.13 (the same step gives slightly different trees), so the rule is by op name, with the name lists
below covering every op this step calls:
  * NO_DATA ops make or re-describe a tensor header, allocate, or read one scalar (views, empty,
    as_strided, resolve_conj, item/_local_scalar_dense): not kernels (stitch does not count views or
    allocations either);
  * WRAPPERS only dispatch to other aten ops that are counted themselves (linear -> t + addmm, relu ->
    clamp_min, cross_entropy_loss -> log_softmax -> _log_softmax, to -> _to_copy -> copy_, zeros ->
    empty + zero_, ...): not kernels;
  * zero_ is a kernel (a memset) on tensors of < 32768 elements; on larger ones it calls fill_,
    which is counted instead (torch 1.13's zero_; decided from the recorded input shape);
  * every other aten op is a kernel: one pass over tensor data (addmm and mm are the GEMMs; addmm's
    bias broadcast is its own copy_ event, counted once as copy_).
The headline torch figure (torch_kernels, the one the goal uses) leaves out the kernels whose inputs
all have <= 1 element (Adam's per-parameter step counter `step_t += 1` and the Python scalars it wraps
into 0-d tensors and casts: real dispatches, but stitch does that arithmetic with Lua numbers, so
counting them would flatter stitch); torch_kernels_all includes them.
Writes `key value` lines: torch_ms, torch_best_ms, torch_1t_ms (the same step on 1 thread: the
time goal is held against the faster of the two, see report()),
torch_kernels (headline), torch_kernels_all, torch_aten_events (every aten event, views included),
torch_threads; with --compare, prints the stitch/torch ratio lines and the two goals (step time <=
torch's; kernels <= 0.5x torch's).
"""
import statistics
import sys
import time

from report import load as report_load  # bench/ is this script's directory, so on sys.path

# aten ops that run no pass over tensor data: header-only views, allocation, metadata, scalar reads.
NO_DATA = {
    "aten::empty", "aten::empty_like", "aten::empty_strided", "aten::resize_", "aten::as_strided",
    "aten::view", "aten::_unsafe_view", "aten::reshape", "aten::_reshape_alias", "aten::t",
    "aten::transpose", "aten::permute", "aten::expand", "aten::squeeze", "aten::unsqueeze",
    "aten::select", "aten::slice", "aten::detach", "aten::detach_", "aten::alias", "aten::lift",
    "aten::lift_fresh", "aten::result_type", "aten::size", "aten::stride", "aten::numel",
    "aten::dim", "aten::unbind", "aten::split", "aten::narrow", "aten::broadcast_to",
    "aten::expand_as", "aten::flatten", "aten::view_as", "aten::conj", "aten::resolve_conj",
    "aten::resolve_neg", "aten::item", "aten::_local_scalar_dense", "aten::is_nonzero",
}
# torch 1.13's zero_ on a dense CPU tensor memsets it itself below at::internal::GRAIN_SIZE (32768)
# elements and calls fill_ otherwise (aten/src/ATen/native/TensorFactories.cpp); the profile agrees
# (zero_grad: the two weights with >= 32768 elements show a fill_ inside their zero_).
ZERO_MEMSET_MAX = 32768
# aten ops that only call other aten ops (which are counted themselves).
WRAPPERS = {
    "aten::linear", "aten::relu", "aten::cross_entropy_loss", "aten::log_softmax",
    "aten::nll_loss_nd", "aten::nll_loss", "aten::zeros", "aten::ones_like", "aten::zeros_like",
    "aten::to", "aten::_to_copy", "aten::contiguous", "aten::softmax", "aten::matmul",
    "aten::ones", "aten::full", "aten::new_zeros", "aten::clone",
}


def load(path):
    """The `key value` lines of one result file (report.py's reader)."""
    return report_load([path])


def train_step(model, opt, x, y):
    """One training step of model on the batch (x, y): cross_entropy, backward, opt.step; returns the loss."""
    import torch.nn.functional as F

    def step():
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss
    return step


def time_steps(step, warm, steps):
    """warm calls of step(), then steps timed ones: (ms per call in call order, the last result)."""
    for _ in range(warm):
        step()
    times, last = [], None
    for _ in range(steps):
        a = time.perf_counter()
        last = step()
        times.append((time.perf_counter() - a) * 1e3)
    return times, last


def count_ops(prof, steps, wrappers=WRAPPERS):
    """Per step: (headline kernels, kernels incl. 1-element ones, all aten events, {name: count}).
    wrappers: the dispatch-only op names to skip (bench_fusion.py passes a superset)."""
    evs = [e for e in prof.events() if e.name.startswith("aten::")]

    def numel(shape):
        n = 1
        for d in shape:
            n *= d
        return n

    def shapes(e):
        return [sh for sh in (e.input_shapes or []) if isinstance(sh, list)]

    kern_all, kern, by_name = 0, 0, {}
    for e in evs:
        if e.name in NO_DATA or e.name in wrappers:
            continue
        if e.name == "aten::zero_" and shapes(e) and numel(shapes(e)[0]) >= ZERO_MEMSET_MAX:
            continue  # calls fill_, which is counted
        kern_all += 1
        sh = shapes(e)
        if sh and all(numel(x) <= 1 for x in sh):
            continue  # 0-d / 1-element tensors only
        kern += 1
        by_name[e.name] = by_name.get(e.name, 0) + 1
    return kern / steps, kern_all / steps, len(evs) / steps, by_name


def report(t, s):
    """Prints the ratio lines and the goals from the torch (t) and stitch (s) result dicts."""
    def fmt(v, f="%.3f"):
        return "n/a" if v is None else f % v

    def faster(a, b):
        vals = [v for v in (a, b) if v is not None]
        return min(vals) if vals else None

    # The time goal compares each side's faster configuration, 2 threads (the default of both) or 1:
    # on this shared 2-core machine, when the cores are oversubscribed, a 2-thread OpenMP step is
    # often several times slower than a 1-thread one (barriers spin waiting for a partner thread that
    # another process has descheduled), in PyTorch and in stitch alike; that measures the machine's
    # load, not the library. On a quiet machine the 2-thread figures are the faster ones.
    t2, t1 = t.get("torch_ms"), t.get("torch_1t_ms")
    s2, s1 = s.get("train_ms"), s.get("train_1t_ms")
    tm, sm = faster(t2, t1), faster(s2, s1)
    tk, sk = t.get("torch_kernels"), s.get("train_kernels", s.get("train_1t_kernels"))
    line = "training step (MLP 784-256-128-10, batch 128, Adam), median ms/step: stitch %s, torch %s" % (
        fmt(sm), fmt(tm))
    if sm and tm:
        line += " (stitch/torch = %.2f x time)" % (sm / tm)
    print(line)
    print("    2 threads: stitch %s, torch %s; 1 thread: stitch %s, torch %s; best single step (2 threads): "
          "stitch %s, torch %s" % (fmt(s2), fmt(t2), fmt(s1), fmt(t1), fmt(s.get("train_best_ms")),
                                   fmt(t.get("torch_best_ms"))))
    line = "    kernels/step: stitch %s, torch %s" % (fmt(sk, "%.1f"), fmt(tk, "%.1f"))
    if sk is not None and tk:
        line += " (stitch/torch = %.2f x)" % (sk / tk)
    print(line + " (torch: aten ops that run a pass over > 1 element; see bench/NOTES.md)")
    if (t2 and t1 and t2 > 1.5 * t1) or (s2 and s1 and s2 > 1.5 * s1):
        print("    warning: a 2-thread step is > 1.5x slower than the 1-thread one: the cores are oversubscribed "
              "(OpenMP threads spin at barriers while their partner is descheduled); times are unreliable")
    for name, ok in [("train step time <= torch's:", None if sm is None or tm is None else sm <= tm),
                     ("train kernels <= 0.5x torch:", None if sk is None or tk is None else sk <= 0.5 * tk)]:
        print("goal %-34s %s" % (name, "n/a" if ok is None else ("met" if ok else "MISSED")))


def main():
    args = sys.argv[1:]
    if args and args[0] == "--report":
        stitch = {}
        for path in args[2:]:
            stitch.update(load(path))
        report(load(args[1]), stitch)
        return 0
    quick = "--quick" in args
    compare = None
    if "--compare" in args:
        compare = args[args.index("--compare") + 1]
    rest = [a for i, a in enumerate(args) if a != "--quick" and a != "--compare"
            and not (i > 0 and args[i - 1] == "--compare")]
    out_path = rest[0] if rest else None
    try:
        import torch
    except Exception as e:  # noqa: BLE001 (any import failure means: no torch)
        print("  torch: not importable (%s): PyTorch numbers skipped (install python3-torch)" % e)
        return 0
    torch.set_num_threads(2)
    torch.manual_seed(0)
    WARM, STEPS, PROF_STEPS = 5, (20 if quick else 50), 5
    model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 128),
                                torch.nn.ReLU(), torch.nn.Linear(128, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.rand(128, 784)
    y = torch.randint(0, 10, (128,))
    step = train_step(model, opt, x, y)
    times, loss = time_steps(step, WARM, STEPS)
    med = statistics.median(times)

    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(PROF_STEPS):
            step()
    kern, kern_all, events, by_name = count_ops(prof, PROF_STEPS)
    names = ", ".join("%s %g" % (k[6:], v / PROF_STEPS) for k, v in sorted(by_name.items(), key=lambda kv: -kv[1]))

    # The same step on one thread (report() compares stitch with the faster of the two).
    torch.set_num_threads(1)
    t1, _ = time_steps(step, WARM, STEPS)
    med1 = statistics.median(t1)
    torch.set_num_threads(2)

    print("  torch %s, %d threads: %.3f ms/step median (best %.3f, worst %.3f; %d steps after %d warm-up); "
          "1 thread %.3f ms/step; loss %.4f" % (torch.__version__, torch.get_num_threads(), med, min(times),
                                               max(times), STEPS, WARM, med1, loss.item()))
    print("    %.1f kernels/step over tensors of > 1 element (%.1f with the 1-element ones; %.1f aten events "
          "in all, views and wrappers included): %s" % (kern, kern_all, events, names))
    if out_path:
        with open(out_path, "w") as f:
            f.write("torch_ms %.6f\ntorch_best_ms %.6f\ntorch_1t_ms %.6f\ntorch_kernels %.3f\n"
                    "torch_kernels_all %.3f\ntorch_aten_events %.3f\ntorch_threads %d\n" % (
                        med, min(times), med1, kern, kern_all, events, torch.get_num_threads()))
    if compare:
        report(load(out_path) if out_path else {"torch_ms": med, "torch_best_ms": min(times),
                                                 "torch_1t_ms": med1, "torch_kernels": kern}, load(compare))
    return 0


if __name__ == "__main__":
    sys.exit(main())
