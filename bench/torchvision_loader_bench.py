"""Throughput of torchvision's training input pipeline: DataLoader(ImageFolder(root, transform))
with the ImageNet training transform (RandomResizedCrop(224), RandomHorizontalFlip, ToTensor,
Normalize) and the evaluation one (Resize(256), CenterCrop(224), ToTensor, Normalize), batch 64,
shuffled, for each worker count. The peer of bench/loader_bench.cpp (run both with
bench/compare_loader.sh); not a test, and nothing consumes the batches but a checksum.

Usage: torchvision_loader_bench.py ROOT [--passes N] [--workers 0,1,2] [--transforms train,eval]
                                   [--batch B]
ROOT is an ImageFolder root (class subfolders). Prints one line per transform and worker count,
from the best of N passes (default 3), in loader_bench's format:
    TRANSFORM WORKERS IMG/S IMG/S_PER_CORE (details)
where per core divides by the worker processes (0 workers: the main process loads, 1 core).
torch runs 1 thread (the DataLoader's workers do too); workers persist across passes, so the
best pass leaves their start-up out, as loader_bench's Loader is made once per worker count.
"""
import argparse
import sys
import time

import torch
from torch.utils.data import DataLoader
from torchvision import datasets, transforms

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
TRANSFORMS = {
    "train": ("random-resized-crop", transforms.Compose([
        transforms.RandomResizedCrop(224), transforms.RandomHorizontalFlip(), transforms.ToTensor(),
        transforms.Normalize(MEAN, STD)])),
    "eval": ("resize-center-crop", transforms.Compose([
        transforms.Resize(256), transforms.CenterCrop(224), transforms.ToTensor(),
        transforms.Normalize(MEAN, STD)])),
}


def loader_rate(root, transform, workers, passes, batch):
    """Images per second of the best of `passes` shuffled passes over the whole folder."""
    ds = datasets.ImageFolder(root, transform)
    loader = DataLoader(ds, batch_size=batch, shuffle=True, num_workers=workers,
                        persistent_workers=workers > 0)
    best, checksum = float("inf"), 0.0
    for _ in range(passes):
        t0 = time.perf_counter()
        for images, _labels in loader:
            checksum += float(images.view(-1)[images.numel() // 2])
        best = min(best, time.perf_counter() - t0)
    del loader  # stops persistent workers before the next configuration starts its own
    return len(ds) / best, len(ds), checksum


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--transforms", default="train,eval")
    ap.add_argument("--batch", type=int, default=64)
    args = ap.parse_args()
    torch.set_num_threads(1)
    checksum = 0.0
    for name in args.transforms.split(","):
        geometry, transform = TRANSFORMS[name]
        for w in (int(v) for v in args.workers.split(",")):
            rate, n, c = loader_rate(args.root, transform, w, args.passes, args.batch)
            checksum += c
            print(f"{name} {w} {rate:.1f} {rate / max(1, w):.1f} ({geometry}, {n} images, batch "
                  f"{args.batch}, best of {args.passes} passes)", flush=True)
    print(f"checksum {checksum:g}", file=sys.stderr)


if __name__ == "__main__":
    main()
