#!/usr/bin/env python3
"""Interop fixture for tests/test_safetensors.cpp, both directions, with torch as the reference.
Writes a small torch model's state dict (plus tensors of the other dtypes) as safetensors
using only struct + json, and checks a file written by the C++ writer against torch.
Not a general safetensors library, and deliberately independent of the `safetensors` package.

usage:
  write_safetensors.py OUT_DIR
      OUT_DIR/model.safetensors, OUT_DIR/manifest.json and, per tensor, its raw bytes
      (NNN.raw.bin) plus torch's own conversion to float32 (NNN.f32.bin, float dtypes) or
      int64 (NNN.i64.bin, integer dtypes), all little-endian.
  write_safetensors.py --check FILE OUT_DIR
      FILE must hold, in this order: every tensor of the manifest unchanged, then for each
      F32 tensor X the tensors "X:f16" and "X:bf16", equal bit for bit to torch's .half() and
      .bfloat16() of X (any NaN for a NaN), with the manifest's metadata plus the writer's
      CRC-32 entries ("crc32:NAME", checked here with zlib.crc32 over each tensor's bytes, and
      "crc32-header"). Exit 1 on mismatch.
"""
import json
import os
import struct
import sys
import zlib

import torch

DTYPES = {  # safetensors name -> torch dtype
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
    "U8": torch.uint8, "BOOL": torch.bool,
}
NAMES = {v: k for k, v in DTYPES.items()}
FLOATS = ("F64", "F32", "F16", "BF16")


def to_bytes(t):
    t = t.detach().contiguous().reshape(-1)
    return t.view(torch.uint8).numpy().tobytes() if t.numel() else b""


def from_bytes(b, dtype, shape):
    if not b:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(bytearray(b), dtype=dtype).reshape(shape)


def build_tensors():
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
        torch.nn.Flatten(), torch.nn.Linear(4 * 5 * 5, 3))
    model.train()
    with torch.no_grad():  # moves BatchNorm's running stats and num_batches_tracked
        for _ in range(2):
            model(torch.randn(2, 3, 5, 5))
    tensors = dict(model.state_dict())

    every16 = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).reshape(256, 256)
    tensors["extra.all_f16"] = every16.view(torch.float16)  # every fp16 bit pattern
    tensors["extra.all_bf16"] = every16.view(torch.bfloat16)  # every bf16 bit pattern
    tensors["extra.f16"] = torch.randn(3, 5).half()
    tensors["extra.bf16"] = torch.randn(5, 3).bfloat16()
    tensors["extra.f64"] = torch.randn(2, 3, dtype=torch.float64) * 1e3
    tensors["extra.i32"] = torch.randint(-2**31, 2**31 - 1, (4,), dtype=torch.int32)
    tensors["extra.i16"] = torch.randint(-2**15, 2**15 - 1, (2, 2), dtype=torch.int16)
    tensors["extra.i8"] = torch.randint(-128, 127, (5,), dtype=torch.int8)
    tensors["extra.u8"] = torch.randint(0, 255, (3,), dtype=torch.uint8)
    tensors["extra.bool"] = torch.rand(7) > 0.5
    tensors["extra.empty"] = torch.zeros(0, 3)
    tensors["extra.scalar"] = torch.tensor(3.25)
    # Float32 inputs for the C++ fp16/bf16 rounding: edge cases plus random bit patterns.
    f = torch.finfo(torch.float32)
    edges = [0.0, -0.0, 1.0, -2.5, 65504.0, 65519.99, 65520.0, 2.0**-24, 2.0**-25,
             3 * 2.0**-26, 2.0**-14, 1 + 2.0**-11, 1 + 3 * 2.0**-11, 1 + 2.0**-8, 1 + 3 * 2.0**-8,
             f.max, -f.max, f.tiny, f.tiny / 3, float("inf"), float("-inf"), float("nan")]
    bits = torch.randint(-2**31, 2**31 - 1, (20000,), dtype=torch.int32).view(torch.float32)
    tensors["extra.stress_f32"] = torch.cat([torch.tensor(edges, dtype=torch.float32), bits])
    return tensors


def write(out_dir):
    tensors = build_tensors()
    metadata = {"format": "pt", "source": "torch " + torch.__version__}
    # Data packed the way the reference library packs it (widest dtype first, then by name),
    # so the data order differs from the header order, which stays the state_dict order.
    order = sorted(tensors, key=lambda n: (-tensors[n].element_size(), n))
    offsets, blob = {}, bytearray()
    for name in order:
        b = to_bytes(tensors[name])
        offsets[name] = [len(blob), len(blob) + len(b)]
        blob += b
    header = {"__metadata__": metadata}
    for name, t in tensors.items():
        header[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape),
                        "data_offsets": offsets[name]}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(os.path.join(out_dir, "model.safetensors"), "wb") as fh:
        fh.write(struct.pack("<Q", len(text)) + text + blob)

    manifest = {"metadata": metadata, "tensors": []}
    for i, (name, t) in enumerate(tensors.items()):
        entry = {"name": name, "dtype": NAMES[t.dtype], "shape": list(t.shape),
                 "raw": "%03d.raw.bin" % i}
        with open(os.path.join(out_dir, entry["raw"]), "wb") as fh:
            fh.write(to_bytes(t))
        if entry["dtype"] in FLOATS:
            entry["f32"] = "%03d.f32.bin" % i
            with open(os.path.join(out_dir, entry["f32"]), "wb") as fh:
                fh.write(to_bytes(t.float()))
        elif entry["dtype"] != "BOOL":
            entry["i64"] = "%03d.i64.bin" % i
            with open(os.path.join(out_dir, entry["i64"]), "wb") as fh:
                fh.write(to_bytes(t.long()))
        manifest["tensors"].append(entry)
    with open(os.path.join(out_dir, "manifest.json"), "w") as fh:
        json.dump(manifest, fh, indent=1)


def no_duplicates(pairs):
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        raise ValueError("duplicate keys in %s" % keys)
    return dict(pairs)


def check(path, out_dir):
    errors = []
    with open(path, "rb") as fh:
        data = fh.read()
    (n,) = struct.unpack("<Q", data[:8])
    raw_header = data[8:8 + n]
    if (8 + n) % 8:
        errors.append("header length %d: data does not start on an 8-byte boundary" % n)
    text = raw_header.rstrip(b" ")
    if not text.endswith(b"}"):
        errors.append("header padding is not spaces after the JSON object")
    header = json.loads(text.decode("utf-8"), object_pairs_hook=no_duplicates)
    buf = data[8 + n:]
    with open(os.path.join(out_dir, "manifest.json")) as fh:
        manifest = json.load(fh)
    metadata = header.pop("__metadata__", None) or {}
    crcs = {k[len("crc32:"):]: v for k, v in metadata.items() if k.startswith("crc32:")}
    if "crc32-header" not in metadata:
        errors.append("no crc32-header entry in the metadata")
    plain = {k: v for k, v in metadata.items() if not k.startswith("crc32")}
    if plain != manifest["metadata"]:
        errors.append("metadata differs from %s" % manifest["metadata"])
    if sorted(crcs) != sorted(header):
        errors.append("CRC-32 entries for %s, tensors %s" % (sorted(crcs), sorted(header)))
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        if name in crcs and crcs[name] != "%08x" % zlib.crc32(buf[begin:end]):
            errors.append("%s: stored CRC-32 %s, zlib.crc32 gives %08x" % (
                name, crcs[name], zlib.crc32(buf[begin:end])))

    expected = []  # (name, dtype, shape, expected bytes or reference float tensor)
    for m in manifest["tensors"]:
        with open(os.path.join(out_dir, m["raw"]), "rb") as fh:
            expected.append((m["name"], m["dtype"], m["shape"], fh.read()))
    for m in manifest["tensors"]:
        if m["dtype"] == "F32":
            with open(os.path.join(out_dir, m["raw"]), "rb") as fh:
                x = from_bytes(fh.read(), torch.float32, m["shape"])
            expected.append((m["name"] + ":f16", "F16", m["shape"], x.half()))
            expected.append((m["name"] + ":bf16", "BF16", m["shape"], x.bfloat16()))

    if list(header) != [e[0] for e in expected]:
        errors.append("tensor names/order %s, expected %s" % (list(header), [e[0] for e in expected]))
    cursor = 0
    for name, dtype, shape, want in expected:
        entry = header.get(name)
        if entry is None:
            continue
        if entry["dtype"] != dtype or entry["shape"] != shape:
            errors.append("%s: %s %s, expected %s %s" % (name, entry["dtype"], entry["shape"], dtype, shape))
            continue
        begin, end = entry["data_offsets"]
        if begin != cursor:
            errors.append("%s: data starts at %d, expected %d (packed in order)" % (name, begin, cursor))
        cursor = end
        got = buf[begin:end]
        if isinstance(want, bytes):
            if got != want:
                errors.append("%s: bytes differ from the original" % name)
            continue
        ours = from_bytes(got, DTYPES[dtype], shape).float()
        ref = want.float()
        same = (ours.view(torch.int32) == ref.view(torch.int32)) | (ours.isnan() & ref.isnan())
        if not bool(same.all()):
            i = int((~same).reshape(-1).nonzero()[0])
            src = from_bytes(expected[[e[0] for e in expected].index(name.split(":")[0])][3],
                             torch.float32, shape).reshape(-1)[i]
            errors.append("%s: element %d of %d: float %r -> %r, torch gives %r" % (
                name, i, int((~same).sum()), float(src), float(ours.reshape(-1)[i]),
                float(ref.reshape(-1)[i])))
    if cursor != len(buf):
        errors.append("data buffer is %d bytes, tensors cover %d" % (len(buf), cursor))
    for e in errors:
        print("write_safetensors.py --check %s: %s" % (path, e), file=sys.stderr)
    if errors:
        sys.exit(1)


if __name__ == "__main__":
    if len(sys.argv) == 2:
        write(sys.argv[1])
    elif len(sys.argv) == 4 and sys.argv[1] == "--check":
        check(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
