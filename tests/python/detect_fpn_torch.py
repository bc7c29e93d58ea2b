"""PyTorch reference for tests/test_detect_fpn.cpp: torchvision 0.14's resnet_fpn_backbone
(FrozenBatchNorm2d, trainable_layers) forward and backward on a random input, with random
frozen BatchNorm statistics so the test sees them. Not a test by itself: the C++ test compares.

usage: detect_fpn_torch.py OUT.safetensors BODY TRAINABLE N H W SEED
Writes "init.NAME" (the state dict), "input", "level.K" and "dlevel.K" (K = 0..4: '0', '1',
'2', '3', 'pool'), "grad.NAME" for every parameter that trains, and "dinput".
"""
import os
import sys

import torch
from torchvision.models.detection.backbone_utils import resnet_fpn_backbone

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402


def main():
    out, body, trainable, n, h, w, seed = sys.argv[1:8]
    torch.manual_seed(int(seed))
    net = resnet_fpn_backbone(backbone_name=body, weights=None, trainable_layers=int(trainable))
    with torch.no_grad():
        for name, buf in net.named_buffers():  # FrozenBatchNorm2d's weight, bias, mean, var
            if name.endswith("running_var"):
                buf.uniform_(0.5, 2.0)
            elif name.endswith("weight"):
                buf.uniform_(0.5, 1.5)
            else:
                buf.uniform_(-0.2, 0.2)
    x = torch.rand(int(n), 3, int(h), int(w)).requires_grad_()
    levels = list(net(x).values())
    assert len(levels) == 5, [t.shape for t in levels]
    dlevels = [torch.randn_like(t) for t in levels]
    sum((a * g).sum() for a, g in zip(levels, dlevels)).backward()
    tensors = {"init." + k: v for k, v in net.state_dict().items()}
    tensors["input"] = x
    for k, (a, g) in enumerate(zip(levels, dlevels)):
        tensors[f"level.{k}"] = a
        tensors[f"dlevel.{k}"] = g
    for name, p in net.named_parameters():
        if p.requires_grad:
            tensors["grad." + name] = p.grad
    tensors["dinput"] = x.grad
    st.save(out, tensors)


if __name__ == "__main__":
    main()
