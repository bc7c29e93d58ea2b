"""PyTorch reference for tests/test_detect_transform.cpp: torchvision 0.14's
GeneralizedRCNNTransform (normalise, resize, batch) on the images and boxes the test wrote,
and its postprocess of boxes back to the original sizes. Not a test by itself.

usage: detect_transform_torch.py IN.safetensors OUT.safetensors MIN_SIZE MAX_SIZE
IN holds "image.K" (3, H, W) and "boxes.K" (n, 4). OUT gets "batch" (N, 3, PH, PW),
"sizes" (N, 2) int64, "boxes.K" (resized) and "back.K" (the resized boxes postprocessed).
"""
import os
import sys

import torch
from torchvision.models.detection.transform import GeneralizedRCNNTransform

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402


def main():
    src, out, min_size, max_size = sys.argv[1:5]
    tensors = st.load(src)
    count = sum(1 for k in tensors if k.startswith("image."))
    images = [tensors[f"image.{k}"] for k in range(count)]
    targets = [{"boxes": tensors[f"boxes.{k}"]} for k in range(count)]
    t = GeneralizedRCNNTransform(int(min_size), int(max_size), [0.485, 0.456, 0.406],
                                 [0.229, 0.224, 0.225])
    t.eval()
    batch, targets = t(images, targets)
    result = {"batch": batch.tensors,
              "sizes": torch.tensor([list(s) for s in batch.image_sizes], dtype=torch.int64)}
    for k, tg in enumerate(targets):
        result[f"boxes.{k}"] = tg["boxes"]
    back = t.postprocess([{"boxes": tg["boxes"].clone()} for tg in targets], batch.image_sizes,
                         [tuple(img.shape[-2:]) for img in images])
    for k, b in enumerate(back):
        result[f"back.{k}"] = b["boxes"]
    st.save(out, result)


if __name__ == "__main__":
    main()
