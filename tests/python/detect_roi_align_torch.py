"""torchvision 0.14 reference for tests/test_detect_roi_align.cpp: runs torchvision.ops.roi_align
and MultiScaleRoIAlign forward and backward on the inputs the C++ test wrote, and writes
torchvision's results back. Not a test by itself: the C++ test compares and decides.

Usage: detect_roi_align_torch.py DIR. DIR/cases.txt has one case per line:
  roi NAME N C H W K PH PW spatial_scale sampling_ratio aligned
      reads NAME.feat.f32 (N,C,H,W), NAME.rois.f32 (K,5), NAME.dout.f32 (K,C,PH,PW);
      writes NAME.out.f32 and NAME.dfeat.f32
  ms NAME N C K L H0 W0 .. H{L-1} W{L-1} h0 w0 .. h{N-1} w{N-1}
      levels '0'..'L-1' of shape (N,C,Hl,Wl) in NAME.feat{l}.f32, image sizes (hi, wi) per
      image, rois (K,5) grouped by image in NAME.rois.f32, NAME.dout.f32 (K,C,7,7);
      MultiScaleRoIAlign(output_size 7, sampling_ratio 2). Writes NAME.out.f32,
      NAME.dfeat{l}.f32, NAME.levels.txt (the mapper's level per roi) and NAME.scales.txt.
All files are raw little-endian float32.
"""
import os
import sys
from collections import OrderedDict

import numpy as np
import torch
import torchvision


def load(path, shape):
    data = np.fromfile(path, dtype="<f4")
    want = int(np.prod(shape))
    if data.size != want:
        sys.exit(f"detect_roi_align_torch.py: {path} holds {data.size} floats, expected {want} for {shape}")
    return torch.from_numpy(data.reshape(shape).copy())


def save(path, t):
    t.detach().numpy().astype("<f4").tofile(path)


def run_roi(root, name, f):
    n, c, h, w, k, ph, pw = (int(v) for v in f[:7])
    scale, sampling, aligned = float(f[7]), int(f[8]), bool(int(f[9]))
    base = os.path.join(root, name)
    feat = load(base + ".feat.f32", (n, c, h, w)).requires_grad_()
    rois = load(base + ".rois.f32", (k, 5))
    out = torchvision.ops.roi_align(feat, rois, (ph, pw), spatial_scale=scale,
                                    sampling_ratio=sampling, aligned=aligned)
    out.backward(load(base + ".dout.f32", tuple(out.shape)))
    save(base + ".out.f32", out)
    save(base + ".dfeat.f32", feat.grad)


def run_ms(root, name, f):
    n, c, k, levels = (int(v) for v in f[:4])
    sizes = [(int(f[4 + 2 * i]), int(f[5 + 2 * i])) for i in range(levels)]
    rest = f[4 + 2 * levels:]
    image_shapes = [(int(rest[2 * i]), int(rest[2 * i + 1])) for i in range(n)]
    base = os.path.join(root, name)
    feats = OrderedDict()
    for i, (h, w) in enumerate(sizes):
        feats[str(i)] = load(f"{base}.feat{i}.f32", (n, c, h, w)).requires_grad_()
    rois = load(base + ".rois.f32", (k, 5))
    boxes = [rois[rois[:, 0] == i, 1:] for i in range(n)]
    order = torch.cat([torch.nonzero(rois[:, 0] == i).flatten() for i in range(n)])
    if not torch.equal(order, torch.arange(k)):
        sys.exit(f"detect_roi_align_torch.py: {name}: rois are not grouped by image")
    pool = torchvision.ops.MultiScaleRoIAlign([str(i) for i in range(levels)], 7, 2)
    out = pool(feats, boxes, image_shapes)
    out.backward(load(base + ".dout.f32", tuple(out.shape)))
    save(base + ".out.f32", out)
    for i in range(levels):
        save(f"{base}.dfeat{i}.f32", feats[str(i)].grad)
    with open(base + ".levels.txt", "w") as fo:
        fo.write(" ".join(str(int(v)) for v in pool.map_levels(boxes)) + "\n")
    with open(base + ".scales.txt", "w") as fo:
        fo.write(" ".join(repr(float(s)) for s in pool.scales) + "\n")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: detect_roi_align_torch.py DIR")
    torch.set_num_threads(1)  # the test machine is shared
    root = sys.argv[1]
    with open(os.path.join(root, "cases.txt")) as fi:
        cases = [line.split() for line in fi if line.strip()]
    if not cases:
        sys.exit("detect_roi_align_torch.py: no cases in cases.txt")
    for f in cases:
        if f[0] == "roi":
            run_roi(root, f[1], f[2:])
        elif f[0] == "ms":
            run_ms(root, f[1], f[2:])
        else:
            sys.exit(f"detect_roi_align_torch.py: unknown case kind {f[0]!r}")


if __name__ == "__main__":
    main()
