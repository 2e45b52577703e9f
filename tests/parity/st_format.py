"""st_format.py — the safetensors format for the Python test scripts (tests/parity/*.py,
tests/run_safetensors_torch.sh without the `safetensors` package): an 8-byte little-endian header
length, a JSON header (dtype, shape, data offsets per name, optional "__metadata__", padded with
blanks to a multiple of 8), then the raw data in the names' sorted order.
"""
import json
import struct

import torch

DT = {"F32": torch.float32, "F64": torch.float64, "I32": torch.int32, "I64": torch.int64,
      "BOOL": torch.bool, "F16": torch.float16, "BF16": torch.bfloat16, "U8": torch.uint8,
      "I8": torch.int8, "I16": torch.int16}
NAME = {v: k for k, v in DT.items()}


def save(path, tensors, metadata=None):
    header, blobs, off = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for k in sorted(tensors):
        t = tensors[k].detach().contiguous()
        raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[k] = {"dtype": NAME[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb + b"".join(blobs))


def load(path):
    """(tensors by name, metadata dict)"""
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    header = json.loads(b[8:8 + n])
    meta = header.pop("__metadata__", {})
    data = bytearray(b[8 + n:])
    out = {}
    for k, e in header.items():
        s, t = e["data_offsets"]
        dt = DT[e["dtype"]]
        x = torch.frombuffer(data[s:t], dtype=dt) if t > s else torch.empty(0, dtype=dt)
        out[k] = x.reshape(e["shape"]).clone()
    return out, meta
