"""PyTorch reference for tests/test_detect_fpn.cpp: torchvision 0.14's resnet_fpn_backbone
(FrozenBatchNorm2d, trainable_layers) forward and backward on a random input, with random
BatchNorm statistics and affine values so the test sees them. With NORM "bn" the body has
ordinary BatchNorm2d in training mode (torchvision's choice from random weights): batch
statistics, and running statistics that move. Not a test by itself: the C++ test compares.

usage: detect_fpn_torch.py OUT.safetensors BODY TRAINABLE N H W SEED [NORM]
Writes "init.NAME" (the state dict), "input", "level.K" and "dlevel.K" (K = 0..4: '0', '1',
'2', '3', 'pool'), "grad.NAME" for every parameter that trains, "dinput", and with NORM bn
"after.NAME" for every running statistic after the forward pass.
"""
import os
import sys

import torch
from torchvision.models.detection.backbone_utils import resnet_fpn_backbone

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402


def main():
    out, body, trainable, n, h, w, seed = sys.argv[1:8]
    bn = len(sys.argv) > 8 and sys.argv[8] == "bn"
    torch.manual_seed(int(seed))
    extra = {"norm_layer": torch.nn.BatchNorm2d} if bn else {}
    net = resnet_fpn_backbone(backbone_name=body, weights=None, trainable_layers=int(trainable), **extra)
    net.train()
    with torch.no_grad():
        # FrozenBatchNorm2d's weight, bias, mean, var are buffers; BatchNorm2d's affine ones
        # are parameters.
        norms = [(k, m) for k, m in net.named_modules() if isinstance(m, torch.nn.BatchNorm2d)]
        for name, buf in list(net.named_buffers()) + [(k + ".weight", m.weight) for k, m in norms] + \
                [(k + ".bias", m.bias) for k, m in norms]:
            if name.endswith("num_batches_tracked"):
                continue
            if name.endswith("running_var"):
                buf.uniform_(0.5, 2.0)
            elif name.endswith("weight"):
                buf.uniform_(0.5, 1.5)
            else:
                buf.uniform_(-0.2, 0.2)
    x = torch.rand(int(n), 3, int(h), int(w)).requires_grad_()
    tensors = {"init." + k: v.clone() for k, v in net.state_dict().items()}
    tensors["input"] = x
    levels = list(net(x).values())
    assert len(levels) == 5, [t.shape for t in levels]
    dlevels = [torch.randn_like(t) for t in levels]
    sum((a * g).sum() for a, g in zip(levels, dlevels)).backward()
    for k, (a, g) in enumerate(zip(levels, dlevels)):
        tensors[f"level.{k}"] = a
        tensors[f"dlevel.{k}"] = g
    for name, p in net.named_parameters():
        if p.requires_grad:
            tensors["grad." + name] = p.grad
    tensors["dinput"] = x.grad
    if bn:
        for name, buf in net.named_buffers():
            if name.endswith("running_mean") or name.endswith("running_var"):
                tensors["after." + name] = buf
    st.save(out, tensors)


if __name__ == "__main__":
    main()
