"""Minimal safetensors read/write with struct + json (no safetensors package), for the
scripts that exchange tensors with the C++ tests. Not a validator: the C++ reader is."""
import json
import struct

import torch

_NAMES = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16",
          torch.bfloat16: "BF16", torch.int64: "I64", torch.int32: "I32", torch.uint8: "U8"}
_DTYPES = {v: k for k, v in _NAMES.items()}


def save(path, tensors, metadata=None):
    """tensors: name -> torch tensor, written in insertion order, each straight from its own
    memory (no joined copy: the parity references hold models of 500 MB)."""
    header, parts, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name, t in tensors.items():
        t = t.detach().contiguous().cpu()
        size = t.numel() * t.element_size()
        header[name] = {"dtype": _NAMES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + size]}
        if size:
            parts.append(t.reshape(-1).view(torch.uint8).numpy())
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(text)) + text)
        for part in parts:
            fh.write(memoryview(part))


def load(path):
    """name -> torch tensor, in header order."""
    with open(path, "rb") as fh:
        raw = fh.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    out = {}
    for name, e in header.items():
        b, end = e["data_offsets"]
        buf = bytearray(raw[8 + n + b:8 + n + end])
        dtype = _DTYPES[e["dtype"]]
        out[name] = (torch.frombuffer(buf, dtype=dtype).reshape(e["shape"]) if buf
                     else torch.empty(e["shape"], dtype=dtype))
    return out
