"""PyTorch reference for tests/test_detect_fpn.cpp's RPN head case: torchvision 0.14's RPNHead
on random feature levels, forward and backward. Not a test by itself.

usage: detect_rpn_head_torch.py OUT.safetensors C A N SEED H0 W0 H1 W1 ...
Writes "init.NAME", "feature.L", "objectness.L", "deltas.L", "dobjectness.L", "ddeltas.L",
"dfeature.L" per level L and "grad.NAME" per parameter.
"""
import os
import sys

import torch
from torchvision.models.detection.rpn import RPNHead

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402


def main():
    out, c, a, n, seed = sys.argv[1:6]
    sizes = [int(v) for v in sys.argv[6:]]
    torch.manual_seed(int(seed))
    head = RPNHead(int(c), int(a))
    with torch.no_grad():  # biases away from their zero init, so the test sees them
        for name, p in head.named_parameters():
            if name.endswith("bias"):
                p.uniform_(-0.1, 0.1)
    feats = [torch.randn(int(n), int(c), h, w).requires_grad_()
             for h, w in zip(sizes[0::2], sizes[1::2])]
    obj, deltas = head(feats)
    dobj = [torch.randn_like(t) for t in obj]
    ddel = [torch.randn_like(t) for t in deltas]
    (sum((t * g).sum() for t, g in zip(obj, dobj)) +
     sum((t * g).sum() for t, g in zip(deltas, ddel))).backward()
    tensors = {"init." + k: v for k, v in head.state_dict().items()}
    for l, f in enumerate(feats):
        tensors[f"feature.{l}"] = f
        tensors[f"objectness.{l}"] = obj[l]
        tensors[f"deltas.{l}"] = deltas[l]
        tensors[f"dobjectness.{l}"] = dobj[l]
        tensors[f"ddeltas.{l}"] = ddel[l]
        tensors[f"dfeature.{l}"] = f.grad
    for name, p in head.named_parameters():
        tensors["grad." + name] = p.grad
    st.save(out, tensors)


if __name__ == "__main__":
    main()
