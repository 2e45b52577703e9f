"""mlp_parity.py — the PyTorch half of the parity test: replays mlp_parity.lua's training in PyTorch
(CPU, f32) from the same initial weights and batches, and compares per-step losses and the weights
after the SGD run. Prints `PASS name` / `FAIL name: why` lines (tests/run.sh counts them).

Usage: /usr/bin/python3 tests/parity/mlp_parity.py DIR    (DIR as written by mlp_parity.lua)

PyTorch is the reference ("a peer says what is right"): a loss matches when
|stitch - torch| <= 1e-4 * max(|torch|, 1e-8); final SGD weights when max |stitch - torch| <= 1e-4.
The safetensors files are read with the `safetensors` package when it is importable, else with the
small reader below (8-byte little-endian header length, JSON header, raw little-endian data), so
the test needs nothing but torch.
"""
import json
import os
import struct
import sys

import torch

STEPS = 20
LOSS_RTOL = 1e-4
WEIGHT_ATOL = 1e-4

DTYPES = {"F32": torch.float32, "F64": torch.float64, "I64": torch.int64, "I32": torch.int32,
          "F16": torch.float16, "BF16": torch.bfloat16, "BOOL": torch.bool, "U8": torch.uint8,
          "I8": torch.int8, "I16": torch.int16}


def read_safetensors_plain(path):
    """Parses the format by hand; returns {name: tensor} (copies, the file is closed after)."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = blob[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        lo, hi = info["data_offsets"]
        dt = DTYPES[info["dtype"]]
        t = torch.frombuffer(bytearray(data[lo:hi]), dtype=dt) if hi > lo else torch.empty(0, dtype=dt)
        out[name] = t.reshape(info["shape"]).clone()
    return out


def read_safetensors(path):
    try:
        from safetensors.torch import load_file
    except Exception:  # not installed, or a version that does not know this torch
        return read_safetensors_plain(path)
    return load_file(path)


def make_model():
    return torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 128),
                               torch.nn.ReLU(), torch.nn.Linear(128, 10))


def train(init, xs, ys, make_opt):
    """Returns the per-step losses and the model after STEPS steps, the same loop as the Lua side."""
    model = make_model()
    model.load_state_dict(init)  # strict: the names must be PyTorch's
    opt = make_opt(model.parameters())
    losses = []
    for i in range(STEPS):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(xs[i]), ys[i])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, model


def main():
    d = sys.argv[1]
    torch.set_num_threads(1)
    ok = True

    def report(name, good, why):
        nonlocal ok
        ok = ok and good
        print(("PASS %s" % name) if good else ("FAIL %s: %s" % (name, why)))

    init = read_safetensors(os.path.join(d, "init.safetensors"))
    # PyTorch's default Linear init: weight and bias U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
    bad = []
    for k, v in init.items():
        fan_in = init[k.split(".")[0] + ".weight"].shape[1]
        bound = fan_in ** -0.5
        m, sd = v.abs().max().item(), v.std().item()
        if m > bound:
            bad.append("%s: max |value| %.4g > PyTorch's bound %.4g" % (k, m, bound))
        # The weights have >= 1280 values: their spread must be U(-b, b)'s (std b/sqrt(3)).
        if k.endswith("weight") and not (m >= 0.99 * bound and abs(sd / (bound / 3 ** 0.5) - 1) < 0.05):
            bad.append("%s: max |value| %.4g, std %.4g; U(-b, b) with b = %.4g has std %.4g" % (
                k, m, sd, bound, bound / 3 ** 0.5))
    report("parity_init_is_torch_default", not bad, "; ".join(bad))
    data = read_safetensors(os.path.join(d, "data.safetensors"))
    xs = data["x"].float()
    ys = data["y"].long() - 1  # stitch's class ids are 1-based, PyTorch's 0-based
    report("parity_labels_in_range", bool(ys.min() >= 0 and ys.max() <= 9),
           "labels out of 1..10 in data.safetensors: min %d max %d" % (ys.min() + 1, ys.max() + 1))

    theirs = {"sgd": {}, "adam": {}}
    with open(os.path.join(d, "losses.txt")) as f:
        for line in f:
            name, step, val = line.split()
            theirs[name][int(step)] = float(val)

    runs = [("sgd", lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9)),
            ("adam", lambda p: torch.optim.Adam(p, lr=1e-3))]
    sgd_model = None
    for name, make_opt in runs:
        ref, model = train(init, xs, ys, make_opt)
        if name == "sgd":
            sgd_model = model
        worst, worst_step, missing = 0.0, 0, []
        for i, b in enumerate(ref, 1):
            a = theirs[name].get(i)
            if a is None:
                missing.append(i)
                continue
            rel = abs(a - b) / max(abs(b), 1e-8)
            if not rel <= worst:  # also catches NaN
                worst, worst_step = rel, i
        print("%s: torch losses %.6f -> %.6f, stitch %s -> %s; max relative difference %.3g (step %d)" % (
            name, ref[0], ref[-1], theirs[name].get(1), theirs[name].get(STEPS), worst, worst_step))
        if missing:
            report("parity_%s_losses" % name, False, "stitch wrote no loss for steps %s" % missing)
        else:
            report("parity_%s_losses" % name, worst <= LOSS_RTOL,
                   "step %d: stitch %.9g, torch %.9g (relative difference %.3g > %g)" % (
                       worst_step, theirs[name][worst_step], ref[worst_step - 1], worst, LOSS_RTOL))

    final = read_safetensors(os.path.join(d, "sgd_final.safetensors"))
    ref_sd = sgd_model.state_dict()
    if set(final) != set(ref_sd):
        report("parity_sgd_final_weights", False,
               "names differ: stitch %s, torch %s" % (sorted(final), sorted(ref_sd)))
    else:
        worst, worst_name = 0.0, ""
        for k, v in ref_sd.items():
            if tuple(final[k].shape) != tuple(v.shape):
                worst, worst_name = float("inf"), k + " (shape %s vs %s)" % (tuple(final[k].shape), tuple(v.shape))
                break
            diff = (final[k].float() - v).abs().max().item()
            if not diff <= worst:
                worst, worst_name = diff, k
        moved = max((final[k].float() - init[k]).abs().max().item() for k in init)
        print("sgd final weights: max abs difference %.3g (%s); training moved them by up to %.3g" % (
            worst, worst_name, moved))
        # A comparison of weights that barely moved would say nothing about the updates.
        report("parity_sgd_weights_moved", moved > 100 * WEIGHT_ATOL,
               "the weights moved by at most %.3g in 20 SGD steps" % moved)
        report("parity_sgd_final_weights", worst <= WEIGHT_ATOL,
               "max abs difference %.3g in %s > %g" % (worst, worst_name, WEIGHT_ATOL))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
