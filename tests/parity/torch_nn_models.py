"""torch_nn_models.py — PyTorch's half of the state_dict interop test (tests/run_torch_load.sh;
tests/lua/test_nn_torch_load.lua is stitch's half).

  python3 torch_nn_models.py write OUT.safetensors [SEED]
      builds small models (nested Sequential with BatchNorm1d, a conv net with BatchNorm2d, a
      2-layer bidirectional LSTM, a batch_first GRU saved in f64, MultiheadAttention, a norm_first
      TransformerEncoderLayer, a custom module with Embedding, ModuleList, ParameterList and
      ModuleDict), trains the BatchNorms' running statistics for a few batches, moves every
      parameter off its initial value, switches to eval and writes into one file, for each model NAME: its state_dict() as "NAME/<torch key>", its inputs
      as "NAME/@in1", ... and its outputs as "NAME/@out1", ... (indices of Embedding: 0-based).
      tests/parity/torch_nn_models.safetensors is this file for SEED 0 (so the Lua test runs where
      torch is missing); regenerate it with this command.
  python3 torch_nn_models.py check IN.safetensors DIR
      for each model, loads DIR/NAME.safetensors (stitch's state_dict({to = "torch"}), written by
      the Lua test) into a fresh model with strict=True and checks that every tensor equals the one
      the model had in IN (cast to the stitch model's dtype) and that the outputs are the same
      (within 1e-5). Prints PASS/FAIL lines.

No `safetensors` package is needed: the format (8-byte little-endian header length, a JSON header,
the raw data) is written and read by st_format.py with json and struct.
"""
import sys

import torch
import torch.nn as nn

from st_format import load as load_st, save  # noqa: E402 (tests/parity is the script's directory)


def load(path):
    return load_st(path)[0]


class Custom(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(6, 4)
        self.layers = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)])
        self.scales = nn.ParameterList([nn.Parameter(torch.randn(4)), nn.Parameter(torch.randn(4))])
        self.heads = nn.ModuleDict({"a": nn.Linear(4, 2), "b": nn.Linear(4, 3)})

    def forward(self, idx):
        x = self.emb(idx)
        for layer, s in zip(self.layers, self.scales):
            x = torch.tanh(layer(x)) * s
        return torch.cat([self.heads["a"](x), self.heads["b"](x)], -1)


# name -> (constructor, inputs maker, batches for the BatchNorm statistics or None)
def models():
    return {
        "mlp": (lambda: nn.Sequential(nn.Linear(5, 8), nn.BatchNorm1d(8), nn.ReLU(),
                                      nn.Sequential(nn.Linear(8, 6), nn.GELU(), nn.LayerNorm(6)),
                                      nn.Linear(6, 3)),
                lambda: [torch.randn(4, 5)], lambda: [torch.randn(6, 5) * 2 + 1]),
        "conv": (lambda: nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                                       nn.MaxPool2d(2), nn.Flatten(), nn.Linear(16, 3)),
                 lambda: [torch.randn(2, 2, 4, 4)], lambda: [torch.randn(3, 2, 4, 4) - 0.5]),
        "lstm": (lambda: nn.LSTM(3, 3, num_layers=2, bidirectional=True),
                 lambda: [torch.randn(4, 2, 3)], None),
        "gru": (lambda: nn.GRU(3, 4, batch_first=True).double(),
                lambda: [torch.randn(2, 3, 3, dtype=torch.float64)], None),
        "mha": (lambda: nn.MultiheadAttention(4, 2),
                lambda: [torch.randn(3, 2, 4), torch.randn(5, 2, 4), torch.randn(5, 2, 4)], None),
        "encoder": (lambda: nn.TransformerEncoderLayer(4, 2, dim_feedforward=8, batch_first=True,
                                                       norm_first=True, activation="gelu"),
                    lambda: [torch.randn(2, 3, 4)], None),
        "custom": (Custom, lambda: [torch.tensor([[0, 5, 2], [3, 3, 1]])], None),
    }


def outputs(name, m, ins):
    with torch.no_grad():
        if name == "lstm":
            y, (h, c) = m(*ins)
            return [y, h, c]
        if name == "gru":
            y, h = m(*ins)
            return [y, h]
        if name == "mha":
            y, w = m(*ins)
            return [y, w]
        return [m(*ins)]


def write(path, seed):
    torch.manual_seed(seed)
    out = {}
    for name, (make, make_in, make_batches) in models().items():
        m = make()
        if make_batches is not None:  # running statistics that are not the initial ones
            m.train()
            with torch.no_grad():
                for _ in range(3):
                    m(*make_batches())
        with torch.no_grad():  # no parameter at its initial value (LayerNorm's ones, zero biases)
            for p in m.parameters():
                p.add_(torch.randn_like(p) * 0.2)
        m.eval()
        for k, v in m.state_dict().items():
            out[name + "/" + k] = v
        ins = make_in()
        for i, x in enumerate(ins):
            out["%s/@in%d" % (name, i + 1)] = x
        for i, y in enumerate(outputs(name, m, ins)):
            out["%s/@out%d" % (name, i + 1)] = y
    save(path, out)
    print("wrote %s (%d tensors, seed %d)" % (path, len(out), seed))


def check(path, d):
    ref = load(path)
    bad = 0
    for name, (make, _, _) in models().items():
        want = {k[len(name) + 1:]: v for k, v in ref.items() if k.startswith(name + "/") and "/@" not in k}
        back = load("%s/%s.safetensors" % (d, name))
        m = make()
        try:
            m.load_state_dict(back, strict=True)  # stitch's names must be exactly PyTorch's
        except Exception as e:  # noqa: BLE001 - report any failure as a FAIL line
            print("FAIL torch_loads_stitch_%s: %s" % (name, str(e).replace("\n", " ")))
            bad += 1
            continue
        m.eval()
        # stitch's tensors are PyTorch's, cast to the stitch model's dtype (f32 for the f64 GRU)
        diff = [k for k in want if not torch.equal(back[k], want[k].to(back[k].dtype))]
        ins = [ref["%s/@in%d" % (name, i)] for i in range(1, 4) if "%s/@in%d" % (name, i) in ref]
        outs = outputs(name, m, ins)
        for i, y in enumerate(outs):
            if not torch.allclose(y, ref["%s/@out%d" % (name, i + 1)], atol=1e-5, rtol=1e-5):
                diff.append("output %d" % (i + 1))
        if diff:
            print("FAIL torch_loads_stitch_%s: differs in %s" % (name, ", ".join(diff)))
            bad += 1
        else:
            print("PASS torch_loads_stitch_%s (%d tensors, strict)" % (name, len(want)))
    return bad


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "write":
        write(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 0)
    elif len(sys.argv) == 4 and sys.argv[1] == "check":
        sys.exit(1 if check(sys.argv[2], sys.argv[3]) else 0)
    else:
        sys.exit(__doc__)
