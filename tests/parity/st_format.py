"""st_format.py — the safetensors format for the parity scripts (torch_nn_models.py,
torch_layers_f64.py), without the `safetensors` package: an 8-byte little-endian header length, a
JSON header (dtype, shape, data offsets per name, padded with blanks to a multiple of 8), then the
raw data in the names' sorted order.
"""
import json
import struct

import torch

DT = {"F32": torch.float32, "F64": torch.float64, "I64": torch.int64, "I32": torch.int32,
      "F16": torch.float16, "BOOL": torch.bool}
NAME = {v: k for k, v in DT.items()}


def save(path, tensors):
    header, blobs, off = {}, [], 0
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
