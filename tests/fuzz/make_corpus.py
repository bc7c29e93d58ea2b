#!/usr/bin/python3
"""Writes the seed corpora of the fuzz harnesses (tests/fuzz/corpus/NAME/): a few tiny valid
inputs per parser, in the framing each harness documents at its top. Deterministic; the output
is committed (a few KB per harness), this script is how it was made and how to remake it.
Files named regress-* are not from here: inputs of past findings, kept as regression tests.
Needs python3-pil (a `make deps` package) for the PNG, JPEG and BMP seeds.
Usage: /usr/bin/python3 tests/fuzz/make_corpus.py [OUT_DIR]   (default tests/fuzz/corpus)"""
import gzip
import io
import json
import os
import struct
import sys

from PIL import Image

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus")


def put(harness, name, data):
    d = os.path.join(OUT, harness)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)


# ---- safetensors: 8-byte LE header length, JSON header padded with spaces to 8, data ----
def safetensors(tensors, metadata=None):
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


put("safetensors", "empty", safetensors([]))
put("safetensors", "f32_meta", safetensors(
    [("conv.weight", "F32", [2, 2], struct.pack("<4f", 1, -2.5, 3e38, 0)),
     ("conv.bias", "F32", [2], struct.pack("<2f", 0.5, -0.5))], {"format": "pt", "model": "lenet"}))
put("safetensors", "dtypes", safetensors(
    [("f64", "F64", [2], struct.pack("<2d", 1e300, -1.0)),
     ("f16", "F16", [3], struct.pack("<3H", 0x3C00, 0x7C00, 0x0001)),
     ("bf16", "BF16", [1, 2], struct.pack("<2H", 0x3F80, 0xFF80)),
     ("i64", "I64", [], struct.pack("<q", -7)),
     ("u64", "U64", [1], struct.pack("<Q", 2**63 + 1)),
     ("i32", "I32", [2], struct.pack("<2i", -1, 2**31 - 1)),
     ("i16", "I16", [1], struct.pack("<h", -3)),
     ("i8", "I8", [2], struct.pack("<2b", -128, 127)),
     ("u32", "U32", [1], struct.pack("<I", 2**32 - 1)),
     ("u16", "U16", [1], struct.pack("<H", 65535)),
     ("u8", "U8", [3], bytes([0, 1, 255])),
     ("bool", "BOOL", [2], bytes([0, 1])),
     ("zero", "F32", [0, 3], b"")]))
# An optimizer state as the trainer writes it: step scalar plus per-parameter buffers.
put("safetensors", "optimizer", safetensors(
    [("step", "I64", [], struct.pack("<q", 3)),
     ("momentum_buffer.fc.weight", "F32", [1, 3], struct.pack("<3f", 0.1, 0.2, 0.3))],
    {"optimizer": "sgd", "lr": "0.05"}))

# ---- trainer.json ----
config = {"augment": "none", "batch-size": "64", "bucket-mb": "25", "check-sync": "0",
          "checkpoint-every": "1", "data": "", "dataset": "synthetic", "deterministic": "false",
          "device": "auto", "distribute-data": "true", "epochs": "1", "eval-every": "1",
          "freeze": "", "freeze-backbone": "false", "freeze-bn": "false", "head-lr-mult": "1",
          "image-size": "0", "init-weights": "", "init-weights-partial": "",
          "keep-checkpoints": "3", "learning-rate": "0.05", "mean": "", "model": "lenet",
          "momentum": "0.9", "nesterov": "false", "optimizer": "sgd", "precision": "auto",
          "progress": "none", "resume": "", "save-dir": "runs/x", "scale-lr": "false",
          "schedule": "cosine", "seed": "0", "skip-bad": "false", "std": "", "test-data": "",
          "threads": "0", "val-split": "0.1", "warmup-epochs": "0", "weight-decay": "5e-04",
          "workers": "2"}
state = {"config": config, "epoch": 1,
         "files": {"model.safetensors": {"bytes": 1234, "crc32": 2172594263},
                   "optimizer.safetensors": {"bytes": 1200, "crc32": 1621686790}},
         "format": "mpicnn-checkpoint", "format_version": 1, "global_step": 16,
         "model": "lenet", "optimizer": "sgd", "ranks": 1, "rng_counters": {"shuffle": 2},
         "run_started": "2026-11-24T00:35:08Z", "samples_seen": 1024,
         "saved_at": "2026-11-24T00:35:17Z", "saved_unix_ms": 1795480517611, "seed": 0,
         "step_in_epoch": 0}
put("trainer_json", "minimal", json.dumps(state, indent=1, sort_keys=True))
full = dict(state, data_path="/data/fashion", test_data_path="/data/test",
            validation={"fraction": 0.1, "held_out": 600, "stratified": True},
            input={"channels": 1, "classes": ["a", "b"], "geometry": "resize", "height": 28,
                   "mean": [0.286], "resize": 0, "std": [0.353], "width": 28},
            loss_scale={"scale": 65536.0, "clean_steps": 12, "skipped_steps": 1})
full["config"] = dict(config, model="resnet18", optimizer="adamw", schedule="step:30:0.1",
                      **{"warmup-epochs": "2", "mean": "0.5,0.5,0.5", "std": "0.25,0.25,0.25",
                         "freeze": "conv1,bn1", "init-weights": "w.safetensors",
                         "init-weights-partial": "fc"})
put("trainer_json", "full", json.dumps(full, sort_keys=True))


# ---- IDX: u32 LE n | images file (n bytes) | labels file ----
def idx(magic_dims, dims, payload):
    return struct.pack(">I", 0x0800 | magic_dims) + b"".join(struct.pack(">I", d) for d in dims) + payload


images = idx(3, [2, 3, 4], bytes(range(24)))
labels = idx(1, [2], bytes([3, 9]))
put("idx", "raw", struct.pack("<I", len(images)) + images + labels)
gz_images, gz_labels = gzip.compress(images, mtime=0), gzip.compress(labels, mtime=0)
put("idx", "gzip", struct.pack("<I", len(gz_images)) + gz_images + gz_labels)
# Two gzip members in one file (gzip -d joins them).
half = gzip.compress(images[:10], mtime=0) + gzip.compress(images[10:], mtime=0)
put("idx", "gzip_members", struct.pack("<I", len(half)) + half + labels)

# ---- CIFAR: u8 flags | u16 LE n | names file | batch ----
def cifar_record(labels, seed):
    return bytes(labels) + bytes((seed * 7 + i * 13) % 256 for i in range(3072))


names10 = "\n".join(f"class{k}" for k in range(10)) + "\n\n"
names100 = "\r\n".join(f"fine{k}" for k in range(100)) + "\r\n"
put("cifar", "c10", struct.pack("<BH", 0, 0) + cifar_record([7], 1))
put("cifar", "c10_names", struct.pack("<BH", 2, len(names10)) + names10.encode() + cifar_record([0], 2) + cifar_record([9], 3))
put("cifar", "c100_names", struct.pack("<BH", 3, len(names100)) + names100.encode() + cifar_record([19, 99], 4))

# ---- CSV: u8 flags (split 0 train 1 test 2 all 3 val; 4 classes.txt; 8 stat files) | u16 LE n | classes.txt | csv ----
def csv(flags, text, classes=""):
    return struct.pack("<BH", flags, len(classes)) + classes.encode() + text.encode()


put("csv", "plain", csv(0, "path,label\nimg/a.png,0\nimg/b.jpg,1\n"))
put("csv", "split_quoted", csv(1, '\ufeffid,path,label,split\r\n1,"dir, with comma/a.png",2,train\r\n'
                                  '2,"say ""hi"".png", 0 ,test\r\n\r\n3,"multi\nline.png",1,test'))
put("csv", "classes_all", csv(4 | 2, "label,path,split\n1,/abs/x.bmp,val\n0,y.png,train\n", "cat\ndog\r\n\n"))
put("csv", "stat_files", csv(8, "path,label\ndata.csv,0\nmissing.png,1\n"))


# ---- images: PNG, JPEG, BMP from PIL ----
def pil_bytes(img, fmt, **kw):
    b = io.BytesIO()
    img.save(b, fmt, **kw)
    return b.getvalue()


def pattern(mode, w, h):
    img = Image.new(mode, (w, h))
    bands = len(img.getbands())
    img.putdata([tuple((x * 37 + y * 11 + c * 53) % 256 for c in range(bands)) if bands > 1
                 else (x * 37 + y * 11) % 256 for y in range(h) for x in range(w)])
    return img


put("image", "gray.png", pil_bytes(pattern("L", 5, 3), "PNG"))
put("image", "rgb.png", pil_bytes(pattern("RGB", 4, 4), "PNG"))
put("image", "rgba.png", pil_bytes(pattern("RGBA", 5, 4), "PNG"))  # 20 pixels: the SIMD alpha drop
put("image", "la.png", pil_bytes(pattern("LA", 3, 2), "PNG"))
put("image", "palette.png", pil_bytes(pattern("RGB", 6, 2).convert("P"), "PNG"))
put("image", "gray16.png", pil_bytes(pattern("I;16", 2, 2), "PNG"))
put("image", "gray.jpg", pil_bytes(pattern("L", 8, 8), "JPEG", quality=90))
put("image", "rgb.jpg", pil_bytes(pattern("RGB", 17, 9), "JPEG", quality=75))
put("image", "rgb420.jpg", pil_bytes(pattern("RGB", 16, 16), "JPEG", quality=50, subsampling=2))
put("image", "progressive.jpg", pil_bytes(pattern("RGB", 12, 10), "JPEG", progressive=True))
put("image", "cmyk.jpg", pil_bytes(pattern("CMYK", 8, 4), "JPEG"))
put("image", "rgb.bmp", pil_bytes(pattern("RGB", 3, 3), "BMP"))
put("image", "gray.bmp", pil_bytes(pattern("L", 5, 2), "BMP"))
put("image", "palette.bmp", pil_bytes(pattern("RGB", 4, 3).convert("P"), "BMP"))
put("image", "rgba.bmp", pil_bytes(pattern("RGBA", 2, 2), "BMP"))

# ---- --config files ----
put("config", "basic", "# a run\nmodel = resnet18\ndata = /data/imagenette\nepochs = 2\n"
                       "batch-size = 32\nlearning-rate = 0.1\n")
put("config", "many", "model=lenet\ndataset = synthetic\ndata =\noptimizer = adamw\nschedule = step:10:0.5\n"
                      "warmup-epochs = 1\nmean = 0.5,0.5,0.5\nstd = 0.25,0.25,0.25\naugment = crop-flip\n"
                      "image-size = 32\nskip-bad = true\nfreeze = conv1,bn1\ninit-weights = w.safetensors\n"
                      "init-weights-partial = fc\nhead-lr-mult = 10\nseed = 18446744073709551615\n"
                      "threads = 2\nprecision = bf16\ndevice = cpu\nbucket-mb = 0.5\nnesterov = false\n"
                      "val-split = 0\ncheck-sync = 5\nprogress = plain\nkeep-checkpoints = 0\n")
put("config", "scale", "scale-lr = yes\nnesterov = 1\nmomentum = 0.5\nschedule = cosine\n"
                       "weight-decay = 0\ndistribute-data = off\nfreeze-bn = on\n  # indented comment\n")

# ---- tar shards (WebDataset layout: KEY.ext members, KEY.cls labels) ----
def tar(members, fmt=None):
    import tarfile
    buf = io.BytesIO()
    kw = {"format": fmt} if fmt is not None else {}
    with tarfile.open(fileobj=buf, mode="w", **kw) as t:
        for name, data in members:
            info = tarfile.TarInfo(name)
            if data is None:
                info.type = tarfile.DIRTYPE
                t.addfile(info)
                continue
            info.size = len(data)
            info.mtime = 0
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


tiny_png = pil_bytes(pattern("RGB", 2, 2), "PNG")
put("shards", "two", tar([("000000.png", tiny_png), ("000000.cls", b"3"),
                          ("000001.jpg", pil_bytes(pattern("L", 3, 2), "JPEG")), ("000001.cls", b"9\n")]))
put("shards", "pax_dirs", tar([("d", None), ("d/a.b.png", tiny_png), ("d/a.b.cls", b"0"), ("d/a.b.json", b"{}")],
                              fmt=__import__("tarfile").PAX_FORMAT))
put("shards", "gnu_longname", tar([("k" * 120 + ".png", tiny_png), ("k" * 120 + ".cls", b"1")],
                                  fmt=__import__("tarfile").GNU_FORMAT))
