#!/usr/bin/env python3
"""PyTorch side of the "time to 90% test accuracy on Fashion-MNIST" benchmark.

Trains the same LeNet-5 (torchvision-style names) with the same recipe as our
trainer's defaults, on the same number of threads, and reports per-epoch test
accuracy plus the cumulative *training* time (evaluation excluded) at which
test top-1 first reaches --target.

Recipe: batch 64 (last batch smaller, not dropped), 10 epochs, plain
torch.optim.SGD lr 0.05 momentum 0.9 weight_decay 5e-4, CrossEntropyLoss
(mean), cosine schedule updated before every step:
lr = 0.5*base*(1+cos(pi*t/T)), t = epoch + step/steps_per_epoch (step 0-based),
T = epochs. Inputs x/255 then (x-0.2860)/0.3530. Per-epoch shuffle by
torch.randperm with a Generator seeded with seed+epoch. Default PyTorch init
after torch.manual_seed(seed).

Used by bench/compare_fmnist.sh, which runs it side by side with
`mpiexec -n 1 ./train` on the same recipe, e.g.
  /usr/bin/python3 bench/torch_fmnist.py --threads 2 --stop-at-target --json
Output: one JSON line per epoch ("kind":"epoch") and a final "kind":"result".
"""
import argparse, gzip, json, math, os, sys, time

import numpy as np
import torch
import torch.nn as nn


def read_idx(path, magic):
    with gzip.open(path, "rb") as f:
        data = f.read()
    got = int.from_bytes(data[0:4], "big")
    if got != magic:
        sys.exit(f"{path}: bad magic {got:#x}, expected {magic:#x}")
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(data_dir, split):
    imgs = read_idx(os.path.join(data_dir, f"{split}-images-idx3-ubyte.gz"), 0x803)
    labels = read_idx(os.path.join(data_dir, f"{split}-labels-idx1-ubyte.gz"), 0x801)
    x = torch.from_numpy(imgs.astype(np.float32) / 255.0)
    x = ((x - 0.2860) / 0.3530).unsqueeze(1).contiguous()
    return x, torch.from_numpy(labels.astype(np.int64))


class LeNet(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5, padding=2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.pool = nn.MaxPool2d(2)
        self.avgpool = nn.AdaptiveAvgPool2d((5, 5))
        self.fc1 = nn.Linear(400, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, num_classes)

    def forward(self, x):
        x = self.pool(torch.relu(self.conv1(x)))
        x = self.pool(torch.relu(self.conv2(x)))
        x = torch.flatten(self.avgpool(x), 1)
        x = torch.relu(self.fc1(x))
        x = torch.relu(self.fc2(x))
        return self.fc3(x)


def evaluate(model, x, y, loss_fn):
    model.eval()
    loss = top1 = top5 = 0.0
    with torch.no_grad():
        for i in range(0, len(x), 1000):
            out = model(x[i:i + 1000])
            t = y[i:i + 1000]
            loss += loss_fn(out, t).item() * len(t)
            best = out.topk(5, 1).indices
            top1 += (best[:, 0] == t).sum().item()
            top5 += (best == t[:, None]).any(1).sum().item()
    return loss / len(x), top1 / len(x), top5 / len(x)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--target", type=float, default=0.90)
    p.add_argument("--stop-at-target", action="store_true")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()

    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    torch.manual_seed(a.seed)
    xtr, ytr = load(a.data, "train")
    xte, yte = load(a.data, "t10k")
    model = LeNet()
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9, weight_decay=5e-4)
    loss_fn = nn.CrossEntropyLoss()
    n, bs = len(xtr), a.batch_size
    steps = math.ceil(n / bs)

    train_s, wall0, reached, top1 = 0.0, time.perf_counter(), None, 0.0
    for epoch in range(a.epochs):
        model.train()
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(a.seed + epoch))
        t0, total = time.perf_counter(), 0.0
        for step in range(steps):
            t = epoch + step / steps
            for g in opt.param_groups:
                g["lr"] = 0.5 * a.lr * (1 + math.cos(math.pi * t / a.epochs))
            idx = perm[step * bs:(step + 1) * bs]
            loss = loss_fn(model(xtr[idx]), ytr[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += loss.item() * len(idx)
        ep_s = time.perf_counter() - t0
        train_s += ep_s
        test_loss, top1, top5 = evaluate(model, xte, yte, loss_fn)
        rec = {"kind": "epoch", "epoch": epoch + 1, "train_loss": total / n,
               "test_loss": test_loss, "top1": top1, "top5": top5,
               "epoch_train_seconds": ep_s, "train_seconds": train_s,
               "wall_seconds": time.perf_counter() - wall0, "images_per_s": n / ep_s}
        print(json.dumps(rec), flush=True)
        if not a.json:
            print(f"epoch {epoch + 1}: train_loss {rec['train_loss']:.4f} test_loss "
                  f"{test_loss:.4f} top1 {top1:.4f} top5 {top5:.4f} train {train_s:.1f}s "
                  f"{rec['images_per_s']:.0f} img/s", file=sys.stderr, flush=True)
        if reached is None and top1 >= a.target:
            reached = (epoch + 1, train_s)
            if a.stop_at_target:
                break
    print(json.dumps({"kind": "result", "time_to_target_s": reached and reached[1],
                      "epoch_reached": reached and reached[0], "final_top1": top1,
                      "target": a.target, "threads": a.threads,
                      "wall_seconds": time.perf_counter() - wall0,
                      "torch": torch.__version__}), flush=True)


if __name__ == "__main__":
    main()
