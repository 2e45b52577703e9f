"""bench_cnn.py — the CNN training step of issue 14 (batch 64, 3x32x32; conv 3x3 + ReLU + max_pool 2
with 32 then 64 channels; linear head; cross_entropy; SGD momentum 0.9): stitch (bench_cnn.lua, in a
child process) and PyTorch eager (this process), in the same run, and the ratio.

--model resnet: the model of examples/fashion_mnist_resnet.lua at width 16 (--width N: another; the
example's default is 24 since 2026-11-30), batch 128 of 1x28x28, BatchNorm, SGD Nesterov, weight decay, instead: the step the
example's 15-minute goal depends on.

Run: python3 bench/bench_cnn.py [--quick] [--build DIR] [--model cnn|resnet] [--width N]   (make -C
bench cnn [MODEL=resnet] [WIDTH=N] [TPY=PY]; threads:
ST_THREADS for both, else every CPU). Memory: each side's peak resident set over its warm-up and
timed steps above its resident set before them (/proc/self/clear_refs resets the peak)."""
import os
import re
import subprocess
import sys

import torch
import torch.nn as nn

from bench_train import time_steps, train_step  # bench/ is this script's directory, so on sys.path

HERE = os.path.dirname(os.path.abspath(__file__))


def status_kb(key):
    with open("/proc/self/status") as f:
        m = re.search(key + r":\s*(\d+)", f.read())
    return int(m.group(1)) if m else 0


class Block(nn.Module):
    """The ResNet example's residual block (examples/fashion_mnist_resnet.lua)."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.short = None
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, t):
        h = torch.relu(self.bn1(self.conv1(t)))
        h = self.bn2(self.conv2(h))
        return torch.relu(h + (self.short(t) if self.short is not None else t))


def torch_side(which, steps, width=16, warm=3):
    torch.manual_seed(0)
    if which == "cnn":
        model = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(64 * 8 * 8, 10))
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        x = torch.rand(64, 3, 32, 32) - 0.5
        y = torch.randint(0, 10, (64,))
    else:
        w = width
        model = nn.Sequential(
            nn.Conv2d(1, w, 3, padding=1, bias=False), nn.BatchNorm2d(w), nn.ReLU(),
            Block(w, w, 1), Block(w, 2 * w, 2), Block(2 * w, 4 * w, 2),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4 * w, 10))
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4, nesterov=True)
        x = torch.rand(128, 1, 28, 28)
        y = torch.randint(0, 10, (128,))

    step = train_step(model, opt, x, y)
    rss0 = status_kb("VmRSS")
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
    t, loss = time_steps(step, warm, steps)
    t.sort()
    return {"ms": t[(steps - 1) // 2], "best": t[0], "rss_mb": (status_kb("VmHWM") - rss0) / 1024,
            "loss": loss.item()}


def stitch_side(build, which, quick, width):
    env = dict(os.environ, ST_JIT_ASYNC="0")
    env["ST_DEVICE"] = "cpu"
    cmd = [os.path.join(build, "stitch"), os.path.join(HERE, "bench_cnn.lua"), "--model", which]
    cmd += ["--quick"] if quick else []
    cmd += ["--width", str(width)] if width != 16 else []
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    line = [l for l in r.stdout.splitlines() if l.startswith(which + "_stitch ")]
    if r.returncode != 0 or not line:
        sys.exit("bench_cnn.py: %s failed (status %d):\n%s%s" % (" ".join(cmd), r.returncode, r.stdout, r.stderr))
    print(line[0])
    return {k: float(v) for k, v in re.findall(r"(\w+)=([-\d.]+)", line[0])}


def main():
    args = sys.argv[1:]
    quick = "--quick" in args
    build = os.path.join(HERE, "..", "build")
    which, width = "cnn", 16
    for i, a in enumerate(args):
        if a == "--build" and i + 1 < len(args):
            build = args[i + 1]
        elif a.startswith("--build="):
            build = a.split("=", 1)[1]
        elif a == "--model" and i + 1 < len(args) and args[i + 1] in ("cnn", "resnet"):
            which = args[i + 1]
        elif a == "--width":
            if i + 1 >= len(args) or not args[i + 1].isdigit() or int(args[i + 1]) < 1:
                sys.exit("bench_cnn.py: --width needs an integer >= 1")
            width = int(args[i + 1])
        elif a not in ("--quick", "--build", "--model", "--width") and (
                i == 0 or args[i - 1] not in ("--build", "--model", "--width")):
            sys.exit("bench_cnn.py: unknown argument %r (--quick, --build DIR, --model cnn|resnet, --width N)" % a)
    if width != 16 and which != "resnet":
        sys.exit("bench_cnn.py: --width is for --model resnet")
    if os.environ.get("ST_THREADS"):
        torch.set_num_threads(int(os.environ["ST_THREADS"]))
    print("machine: %d cores, torch %s, %d threads" % (os.cpu_count(), torch.__version__, torch.get_num_threads()))
    s = stitch_side(build, which, quick, width)
    t = torch_side(which, 5 if quick else 20, width)
    print("%s_torch ms=%.3f best=%.3f rss_mb=%.1f loss=%.5f" % (which, t["ms"], t["best"], t["rss_mb"], t["loss"]))
    print("| %s | stitch | torch eager | stitch/eager |"
          % ("CNN train step, batch 64" if which == "cnn" else "ResNet example's train step, batch 128"))
    print("|---|---|---|---|")
    print("| ms (median) | %.2f | %.2f | %.2fx |" % (s["ms"], t["ms"], s["ms"] / t["ms"]))
    print("| peak RSS growth, MB | %.1f | %.1f | %.2fx |" % (s["rss_mb"], t["rss_mb"], s["rss_mb"] / max(t["rss_mb"], 0.1)))
    print("goal (issue 14): stitch/eager time <= 1.0 and memory <= 1.0: %s"
          % ("met" if s["ms"] <= t["ms"] and s["rss_mb"] <= t["rss_mb"] else "MISSED"))


if __name__ == "__main__":
    main()
