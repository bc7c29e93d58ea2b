"""torchvision 0.14 reference for tests/test_detect_boxes.cpp: runs the box coder, box ops, NMS
and the anchor generator on the inputs the C++ test wrote and writes torchvision's results back.
Not a test by itself: the C++ test compares and decides.

Usage: detect_boxes_torch.py DIR. DIR/cases.txt has one case per line (raw little-endian files
DIR/NAME.<part>.f32 / .i64 hold the arrays):
  encode NAME n wx wy ww wh          gt, prop (n, 4)            -> out (n, 4)
  decode NAME n k wx wy ww wh        deltas (n, k*4), ref (n, 4) -> out (n, k*4)
  iou NAME na nb                     a (na, 4), b (nb, 4)        -> out (na, nb), area_a (na)
  clip NAME n height width           boxes (n, 4)                -> out (n, 4)
  small NAME n min_size              boxes (n, 4)                -> keep.i64
  nms NAME n threshold               boxes (n, 4), scores (n)    -> keep.i64
  batched NAME n threshold           boxes, scores, classes.i64  -> keep.i64 (_batched_nms_vanilla),
                                                                    public.i64 (ops.batched_nms)
  anchors NAME H W L [h w S s1..sS R r1..rR] * L                 -> out (total, 4)
"""
import os
import sys

import numpy as np
import torch
import torchvision
from torchvision.models.detection._utils import BoxCoder
from torchvision.models.detection.anchor_utils import AnchorGenerator
from torchvision.models.detection.image_list import ImageList
from torchvision.ops import boxes as box_ops


def load(root, name, part, dtype, shape):
    path = os.path.join(root, f"{name}.{part}")
    data = np.fromfile(path, dtype=dtype)
    want = int(np.prod(shape))
    if data.size != want:
        sys.exit(f"detect_boxes_torch.py: {path} holds {data.size} values, expected {want} for {shape}")
    return torch.from_numpy(data.reshape(shape).copy())


def save(root, name, part, tensor, dtype):
    tensor.detach().numpy().astype(dtype).tofile(os.path.join(root, f"{name}.{part}"))


def run_case(root, f):
    op, name = f[0], f[1]
    f32 = lambda part, shape: load(root, name, part + ".f32", "<f4", shape)
    if op == "encode":
        n = int(f[2])
        coder = BoxCoder(tuple(float(v) for v in f[3:7]))
        out = coder.encode_single(f32("gt", (n, 4)), f32("prop", (n, 4)))
        save(root, name, "out.f32", out, "<f4")
    elif op == "decode":
        n, k = int(f[2]), int(f[3])
        coder = BoxCoder(tuple(float(v) for v in f[4:8]))
        out = coder.decode_single(f32("deltas", (n, k * 4)), f32("ref", (n, 4)))
        save(root, name, "out.f32", out, "<f4")
    elif op == "iou":
        na, nb = int(f[2]), int(f[3])
        a, b = f32("a", (na, 4)), f32("b", (nb, 4))
        save(root, name, "out.f32", box_ops.box_iou(a, b), "<f4")
        save(root, name, "area.f32", box_ops.box_area(a), "<f4")
    elif op == "clip":
        n, height, width = int(f[2]), int(f[3]), int(f[4])
        save(root, name, "out.f32", box_ops.clip_boxes_to_image(f32("boxes", (n, 4)), (height, width)), "<f4")
    elif op == "small":
        n, min_size = int(f[2]), float(f[3])
        save(root, name, "keep.i64", box_ops.remove_small_boxes(f32("boxes", (n, 4)), min_size), "<i8")
    elif op == "nms":
        n, thr = int(f[2]), float(f[3])
        keep = torchvision.ops.nms(f32("boxes", (n, 4)), f32("scores", (n,)), thr)
        save(root, name, "keep.i64", keep, "<i8")
    elif op == "batched":
        n, thr = int(f[2]), float(f[3])
        boxes, scores = f32("boxes", (n, 4)), f32("scores", (n,))
        classes = load(root, name, "classes.i64", "<i8", (n,))
        save(root, name, "keep.i64", box_ops._batched_nms_vanilla(boxes, scores, classes, thr), "<i8")
        save(root, name, "public.i64", box_ops.batched_nms(boxes, scores, classes, thr), "<i8")
    elif op == "anchors":
        height, width, levels = int(f[2]), int(f[3]), int(f[4])
        rest = f[5:]
        sizes, ratios, feats = [], [], []
        for _ in range(levels):
            h, w, ns = int(rest[0]), int(rest[1]), int(rest[2])
            sizes.append(tuple(float(v) for v in rest[3:3 + ns]))
            nr = int(rest[3 + ns])
            ratios.append(tuple(float(v) for v in rest[4 + ns:4 + ns + nr]))
            feats.append(torch.empty((1, 1, h, w)))
            rest = rest[4 + ns + nr:]
        gen = AnchorGenerator(tuple(sizes), tuple(ratios))
        images = ImageList(torch.zeros(1, 1, 1, 1).expand(1, 3, height, width), [(height, width)])
        save(root, name, "out.f32", gen(images, feats)[0], "<f4")
    else:
        sys.exit(f"detect_boxes_torch.py: unknown op {op!r} in case {name}")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: detect_boxes_torch.py DIR")
    torch.set_num_threads(1)  # the test machine is shared
    root = sys.argv[1]
    with open(os.path.join(root, "cases.txt")) as f:
        cases = [line.split() for line in f if line.strip()]
    if not cases:
        sys.exit("detect_boxes_torch.py: no cases in cases.txt")
    for fields in cases:
        run_case(root, fields)


if __name__ == "__main__":
    main()
