"""PyTorch reference for tests/test_pool.cpp: runs max/avg/adaptive-avg pooling forward and
backward on the inputs the C++ test wrote, and writes torch's outputs back.
Not a test by itself: the C++ test compares and decides.

Usage: pool_torch.py DIR. DIR/cases.txt has one case per line:
  max NAME N C H W kh kw sh sw ph pw dh dw ceil
  avg NAME N C H W kh kw sh sw ph pw ceil count_include_pad divisor   (divisor 0 = none)
  adaptive NAME N C H W oh ow
with DIR/NAME.x.f32 (input) and DIR/NAME.dout.f32 (output gradient), raw little-endian
float32. Writes DIR/NAME.y.f32, DIR/NAME.dx.f32 and DIR/NAME.shape.txt ("N C OH OW").
"""
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F


def load(path, shape):
    data = np.fromfile(path, dtype="<f4")
    want = int(np.prod(shape))
    if data.size != want:
        sys.exit(f"pool_torch.py: {path} holds {data.size} floats, expected {want} for {shape}")
    return torch.from_numpy(data.reshape(shape).copy())


def run_case(root, fields):
    op, name = fields[0], fields[1]
    n, c, h, w = (int(v) for v in fields[2:6])
    p = [int(v) for v in fields[6:]]
    x = load(os.path.join(root, name + ".x.f32"), (n, c, h, w)).requires_grad_()
    if op == "max":
        y = F.max_pool2d(x, (p[0], p[1]), stride=(p[2], p[3]), padding=(p[4], p[5]),
                         dilation=(p[6], p[7]), ceil_mode=bool(p[8]))
    elif op == "avg":
        y = F.avg_pool2d(x, (p[0], p[1]), stride=(p[2], p[3]), padding=(p[4], p[5]),
                         ceil_mode=bool(p[6]), count_include_pad=bool(p[7]),
                         divisor_override=p[8] if p[8] != 0 else None)
    elif op == "adaptive":
        y = F.adaptive_avg_pool2d(x, (p[0], p[1]))
    else:
        sys.exit(f"pool_torch.py: unknown op {op!r} in case {name}")
    dout = load(os.path.join(root, name + ".dout.f32"), tuple(y.shape))
    y.backward(dout)
    y.detach().numpy().astype("<f4").tofile(os.path.join(root, name + ".y.f32"))
    x.grad.numpy().astype("<f4").tofile(os.path.join(root, name + ".dx.f32"))
    with open(os.path.join(root, name + ".shape.txt"), "w") as f:
        f.write(" ".join(str(v) for v in y.shape) + "\n")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: pool_torch.py DIR")
    torch.set_num_threads(1)  # deterministic summation order, and the test machine is shared
    root = sys.argv[1]
    with open(os.path.join(root, "cases.txt")) as f:
        cases = [line.split() for line in f if line.strip()]
    if not cases:
        sys.exit("pool_torch.py: no cases in cases.txt")
    for fields in cases:
        run_case(root, fields)


if __name__ == "__main__":
    main()
