"""Tar shards from Python's side, for the shard tests (tests/test_shards.cpp, tests/mpi/test_train.cpp):
what a WebDataset user's own scripts would write and read. Not a shard library.

  shards_python.py folder OUT PER_CLASS CLASSES [TEST]
      a class-patterned JPEG image folder OUT/train/c<k>/img_<i>.jpg and OUT/TEST/... (TEST:
      test unless given, e.g. val as ImageNet's; 32x32;
      each class its own colour and stripe, plus noise: easy to learn)
  shards_python.py write ROOT OUT PER_SHARD [PREFIX]
      torchvision's ImageFolder(ROOT) as shards OUT/PREFIX-NNNNNN.tar (PREFIX: train unless
      given; KEY.jpg + KEY.cls, the file's own bytes, samples in a seeded random order), with
      tarfile and no index
  shards_python.py read TAR...
      one line per sample: key, label, image extension, image size, zlib.crc32 of the image
"""
import io
import os
import random
import sys
import tarfile
import zlib

import numpy as np
from PIL import Image


def folder(out, per_class, classes, test):
    rng = np.random.default_rng(7)
    for split, n in (("train", per_class), (test, max(2, per_class // 4))):
        for k in range(classes):
            d = os.path.join(out, split, f"c{k:02d}")
            os.makedirs(d, exist_ok=True)
            colour = np.array([(k * 83) % 256, (k * 157 + 60) % 256, (k * 211 + 120) % 256], np.float32)
            for i in range(n):
                img = np.zeros((32, 32, 3), np.float32) + colour * 0.6
                img[:, (k * 3) % 32:(k * 3) % 32 + 4] = 255 - colour  # the class's stripe
                img += rng.normal(0, 12, img.shape)
                Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(
                    os.path.join(d, f"img_{i:04d}.jpg"), quality=92)


def add(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def write(root, out, per_shard, prefix):
    from torchvision.datasets import ImageFolder
    samples = list(ImageFolder(root).samples)
    random.Random(0).shuffle(samples)
    os.makedirs(out, exist_ok=True)
    for s in range(0, len(samples), per_shard):
        with tarfile.open(os.path.join(out, f"{prefix}-{s // per_shard:06d}.tar"), "w") as tar:
            for i, (path, label) in enumerate(samples[s:s + per_shard], start=s):
                ext = os.path.splitext(path)[1].lower().lstrip(".")
                add(tar, f"{i:06d}.{ext}", open(path, "rb").read())
                add(tar, f"{i:06d}.cls", str(label).encode())


def read(paths):
    for p in paths:
        with tarfile.open(p) as tar:
            groups = {}
            order = []
            for m in tar.getmembers():
                if not m.isfile():
                    continue
                key, ext = m.name.split(".", 1)
                if key not in groups:
                    groups[key] = {}
                    order.append(key)
                groups[key][ext.lower()] = tar.extractfile(m).read()
            for key in order:
                g = groups[key]
                ext = next(e for e in ("jpg", "jpeg", "png", "bmp") if e in g)
                print(f"{key}\t{int(g['cls'])}\t{ext}\t{len(g[ext])}\t{zlib.crc32(g[ext])}")


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "folder":
        folder(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] if len(sys.argv) > 5 else "test")
    elif cmd == "write":
        write(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5] if len(sys.argv) > 5 else "train")
    elif cmd == "read":
        read(sys.argv[2:])
    else:
        sys.exit(f"unknown command {cmd}")
