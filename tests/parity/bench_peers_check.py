"""bench_peers_check.py — checks of bench/bench_fusion_peers.py (issue 15) that need neither JAX nor
tinygrad (run by tests/run_bench_peers.sh with Debian's python3, torch and numpy):
- the peers' numpy inputs and parameters are bit-identical to the torch twins' (bench_fusion's
  torch_pattern / torch_init_params; the MLP and the transformer block, in named_parameters order);
- a peer that cannot be imported: the child prints "<peer>: not installed (...)" and exits 3, and
  bench_fusion.run_peers gives it no results;
- hlo_kernels counts a compiled XLA module's ENTRY kernels (fusions, dots), not its parameters,
  constants, bitcasts and tuples;
- the peer table: a missing peer is n/a, a peer whose checksum differs from torch eager's beyond the
  tolerance is FAILED and its ratio invalid, a matching one gets stitch / peer.
Prints `PASS name` / `FAIL name: why`; exit status 1 on any failure.
"""
import contextlib
import io
import os
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "bench"))
import numpy as np  # noqa: E402
import torch  # noqa: E402
import bench_fusion as bf  # noqa: E402
import bench_fusion_peers as bp  # noqa: E402

failed = []


def report(name, ok, why=""):
    print("PASS %s" % name if ok else "FAIL %s: %s" % (name, why))
    if not ok:
        failed.append(name)


def same(a, t):
    return a.dtype == np.float32 and a.shape == tuple(t.shape) and np.array_equal(a.view(np.int32), t.numpy().view(np.int32))


def main():
    I = bp.Inputs(np)
    ok = all(same(I.inp(s, seed, sc), bf.torch_pattern(torch, s, seed) * sc)
             for s, seed, sc in [([64, 1024], 1, 4), ([1024], 3, 1.0), ([128, 784], 1, 1.0), ([32, 32], 2, 1 / 16)])
    report("bench_peers_inputs_bitwise", ok, "numpy pattern differs from torch_pattern")

    mlp = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 128),
                              torch.nn.ReLU(), torch.nn.Linear(128, 10))
    B, T, C, H, V = bp.BLOCK
    for name, model, specs in [("mlp", mlp, bp.MLP_SPECS), ("block", bf.torch_block(torch, C, H, V), bp.block_specs(C, V))]:
        bf.torch_init_params(torch, model)
        named = list(model.named_parameters())
        names_ok = [(n, tuple(p.shape)) for n, p in named] == [(n, tuple(s)) for n, s in specs]
        vals_ok = names_ok and all(same(a, p.detach()) for a, (_, p) in zip(I.params(specs), named))
        report("bench_peers_params_%s" % name, names_ok and vals_ok,
               "specs differ from named_parameters" if not names_ok else "initial values differ")

    with tempfile.TemporaryDirectory() as tmp:
        for peer in ("jax", "tinygrad"):
            fake = os.path.join(tmp, "fake_" + peer, peer)
            os.makedirs(fake)
            with open(os.path.join(fake, "__init__.py"), "w") as f:
                f.write("raise ImportError('hidden by bench_peers_check')\n")
            env = dict(os.environ, PYTHONPATH=os.path.dirname(fake))
            p = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "bench_fusion_peers.py"), "--peer=" + peer,
                                "--threads=1", "--out=" + os.path.join(tmp, peer + ".txt"), "--cases=mlp"],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            want = "%s: not installed (hidden by bench_peers_check)" % peer
            report("bench_peers_absent_%s" % peer, p.returncode == 3 and want in p.stdout,
                   "status %d, output %r" % (p.returncode, p.stdout[-300:]))
        old = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = os.pathsep.join(os.path.join(tmp, "fake_" + p) for p in ("jax", "tinygrad"))
        try:
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf):
                got = bf.run_peers(["mlp"], True, 1, tmp)
        finally:
            if old is None:
                del os.environ["PYTHONPATH"]
            else:
                os.environ["PYTHONPATH"] = old
        report("bench_peers_run_absent", got == {"jax": {}, "tinygrad": {}} and "jax: not installed" in buf.getvalue()
               and "tinygrad: not installed" in buf.getvalue(), "got %r, printed %r" % (got, buf.getvalue()))

    hlo = ("HloModule m\n\n%fused (p: f32[4]) -> f32[4] {\n  %p = f32[4]{0} parameter(0)\n  ROOT %e = f32[4]{0} exponential(%p)\n}\n\n"
           "ENTRY %main (x.1: f32[4]) -> (f32[4], f32[]) {\n  %x.1 = f32[4]{0} parameter(0)\n  %c = f32[] constant(1)\n"
           "  %f = f32[4]{0} fusion(%x.1), kind=kLoop, calls=%fused\n  %d = f32[] dot(%f, %f), lhs_contracting_dims={0}\n"
           "  %b = f32[2,2]{1,0} bitcast(%f)\n  ROOT %t = (f32[4]{0}, f32[]) tuple(%f, %d)\n}\n")
    n = bp.hlo_kernels(hlo)
    report("bench_peers_hlo_kernels", n == 2, "%d kernels, want 2 (the fusion and the dot)" % n)

    t = {"mlp_ms": 4.0, "mlp_compile_ms": 5.0, "mlp_kernels": 68, "chk_mlp_loss1": 2.475, "chk_mlp_loss2": 2.3838}
    s = {"mlp_ms": 2.0, "mlp_kernels": 14, "chk_mlp_loss1": 2.475, "chk_mlp_loss2": 2.3838}
    peers = {"jax": {"mlp_ms": 1.0, "mlp_kernels": 50, "chk_mlp_loss1": 2.4751, "chk_mlp_loss2": 2.3838},
             "tinygrad": {"mlp_ms": 8.0, "chk_mlp_loss1": 2.475, "chk_mlp_loss2": 2.309}}
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        bf.print_peer_table(s, t, peers, ["mlp"])
        bf.print_peer_table(s, t, {}, ["mlp"])
    rows = [ln for ln in buf.getvalue().splitlines() if ln.startswith("| MLP")]
    want0 = "| 2.000 | 4.000 | 5.000 | 1.000 | 8.000 | 0.50x | 0.40x | 2.00x | invalid | 14 / 68 / 50 / n/a | " \
        "ok, FAILED: chk_mlp_loss2 tinygrad"
    want1 = "| 2.000 | 4.000 | 5.000 | n/a | n/a | 0.50x | 0.40x | n/a | n/a | 14 / 68 / n/a / n/a | n/a, n/a |"
    report("bench_peers_table", len(rows) == 2 and want0 in rows[0] and rows[1].endswith(want1),
           "rows %r" % rows)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
