"""PyTorch reference for tests/test_linear_misc.cpp's label-smoothing parity case: runs
torch.nn.CrossEntropyLoss(label_smoothing=EPS) (mean reduction) forward and backward on the
logits and labels the C++ test wrote, and writes torch's loss and logit gradient back.
Not a test by itself: the C++ test compares and decides.

Usage: xent_torch.py DIR. DIR/cases.txt has one case per line: NAME N C EPS, with DIR/NAME.z.f32
(N x C logits, raw little-endian float32) and DIR/NAME.t.i32 (N labels, int32). Writes
DIR/NAME.loss.txt (the loss, repr of a float64 computed in float64 from the float32 logits, and
the float32 loss) and DIR/NAME.dz.f32 (d loss / d logits of the float32 computation).
"""
import os
import sys

import numpy as np
import torch


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: xent_torch.py DIR")
    torch.set_num_threads(1)
    root = sys.argv[1]
    with open(os.path.join(root, "cases.txt")) as f:
        cases = [line.split() for line in f if line.strip()]
    if not cases:
        sys.exit("xent_torch.py: no cases in cases.txt")
    for name, n, c, eps in cases:
        n, c, eps = int(n), int(c), float(eps)
        z = np.fromfile(os.path.join(root, name + ".z.f32"), dtype="<f4")
        t = np.fromfile(os.path.join(root, name + ".t.i32"), dtype="<i4")
        if z.size != n * c or t.size != n:
            sys.exit(f"xent_torch.py: {name}: {z.size} logits and {t.size} labels, expected {n * c} and {n}")
        labels = torch.from_numpy(t.astype(np.int64))
        loss_fn = torch.nn.CrossEntropyLoss(label_smoothing=eps)
        z64 = torch.from_numpy(z.reshape(n, c).astype(np.float64))
        loss64 = loss_fn(z64, labels).item()
        z32 = torch.from_numpy(z.reshape(n, c).copy()).requires_grad_()
        loss32 = loss_fn(z32, labels)
        loss32.backward()
        with open(os.path.join(root, name + ".loss.txt"), "w") as f:
            f.write(f"{loss64!r} {loss32.item()!r}\n")
        z32.grad.numpy().astype("<f4").tofile(os.path.join(root, name + ".dz.f32"))


if __name__ == "__main__":
    main()
