"""Peer of bench/image_bench.cpp: single-thread throughput of torchvision's eval preprocessing,
PIL.Image.open(path).convert("RGB") + Resize(256) + CenterCrop(224) + ToTensor + Normalize.
Not a DataLoader benchmark (no workers, no batching, no collate).

Usage: pil_image_bench.py DIR [PASSES]   (same file selection and output format as image_bench)
"""
import os
import sys
import time

import torch
import torchvision.transforms as T
from PIL import Image


def main():
    root = sys.argv[1]
    passes = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    torch.set_num_threads(1)
    list_path = os.path.join(root, "list.txt")
    if os.path.exists(list_path):
        names = [n.strip() for n in open(list_path) if n.strip()]
    else:
        names = sorted(os.listdir(root))
    by_format = {}
    for n in names:
        ext = os.path.splitext(n)[1].lower().lstrip(".")
        ext = "jpg" if ext == "jpeg" else ext
        if ext in ("png", "jpg", "bmp"):
            by_format.setdefault(ext, []).append(os.path.join(root, n))
    if not by_format:
        sys.exit(f"{root}: no .png, .jpg or .bmp files")
    tf = T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(),
                    T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    checksum = 0.0
    for fmt in sorted(by_format):
        files = by_format[fmt]
        best = float("inf")
        for _ in range(passes):
            t0 = time.perf_counter()
            for f in files:
                x = tf(Image.open(f).convert("RGB"))
                checksum += float(x[1, 112, 112])
            best = min(best, time.perf_counter() - t0)
        print(f"{fmt} {len(files) / best:.1f} images/s ({len(files)} files, best of {passes} passes)",
              flush=True)
    print(f"checksum {checksum:g}", file=sys.stderr)


if __name__ == "__main__":
    main()
