"""State-dict reference for tests/test_models.cpp, printed at test time (never committed).

usage: model_names.py CLASSES IN_CHANNELS MODEL:MIN_BATCH [MODEL:MIN_BATCH ...]

For each model, built in PyTorch with that num_classes and first-conv in_channels (torchvision
0.14's model, or for lenet/resnet20 the definitions below, written from src/models/small.h),
prints:
  model NAME
  params N                    number of parameters
  min_size S                  smallest square input the model runs on in training mode with a
                              batch of MIN_BATCH images (every BatchNorm sees > 1 value per
                              channel; MIN_BATCH is 1 but for Inception v3, see registry.cpp)
  macs M                      multiply-adds of one image's training-mode forward at min_size
                              (convolutions and linear layers, auxiliary heads included)
  entry KEY D0 D1 ...         one line per state_dict entry, in order, with its shape
  end
Not a test by itself: the C++ test compares and decides. Weights are left uninitialised
(torch.nn.init is switched off while building), which changes no name, shape or shape error.
"""
import contextlib
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


class LeNet(nn.Module):
    """src/models/small.h make_lenet."""

    def __init__(self, num_classes, in_channels):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 6, 5, padding=2)
        self.relu1 = nn.ReLU(inplace=True)
        self.pool1 = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.relu2 = nn.ReLU(inplace=True)
        self.pool2 = nn.MaxPool2d(2)
        self.avgpool = nn.AdaptiveAvgPool2d(5)
        self.flatten = nn.Flatten()
        self.fc1 = nn.Linear(400, 120)
        self.relu3 = nn.ReLU(inplace=True)
        self.fc2 = nn.Linear(120, 84)
        self.relu4 = nn.ReLU(inplace=True)
        self.fc3 = nn.Linear(84, num_classes)

    def forward(self, x):
        x = self.pool1(self.relu1(self.conv1(x)))
        x = self.pool2(self.relu2(self.conv2(x)))
        x = self.flatten(self.avgpool(x))
        return self.fc3(self.relu4(self.fc2(self.relu3(self.fc1(x)))))


def resnet20(num_classes, in_channels):
    """src/models/small.h make_resnet20: torchvision's ResNet machinery with BasicBlocks, a
    3x3 stem without max pool, three stages of 16/32/64 channels."""
    from torchvision.models.resnet import BasicBlock, ResNet

    m = ResNet(BasicBlock, [3, 3, 3, 1], num_classes=num_classes)
    m.inplanes = 16
    m.conv1 = nn.Conv2d(in_channels, 16, 3, 1, 1, bias=False)
    m.bn1 = nn.BatchNorm2d(16)
    m.maxpool = nn.Identity()
    m.layer1 = m._make_layer(BasicBlock, 16, 3)
    m.layer2 = m._make_layer(BasicBlock, 32, 3, stride=2)
    m.layer3 = m._make_layer(BasicBlock, 64, 3, stride=2)
    m.layer4 = nn.Identity()
    m.fc = nn.Linear(64, num_classes)
    for mod in m.modules():  # ResNet's init ran before the swaps above; redo it
        if isinstance(mod, nn.Conv2d):
            nn.init.kaiming_normal_(mod.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(mod, nn.BatchNorm2d):
            nn.init.constant_(mod.weight, 1)
            nn.init.constant_(mod.bias, 0)
    return m


SMALL = {"lenet": LeNet, "resnet20": resnet20}


@contextlib.contextmanager
def no_init():
    """Skips weight initialisation while building (VGG's 100M-weight classifier would take
    seconds to fill for nothing)."""
    saved = {}
    targets = [(nn.init, f) for f in ("kaiming_normal_", "kaiming_uniform_", "normal_",
                                      "trunc_normal_", "uniform_", "constant_", "zeros_",
                                      "ones_")]
    targets += [(c, "reset_parameters") for c in (nn.Conv2d, nn.Linear)]
    for owner, attr in targets:
        saved[(owner, attr)] = getattr(owner, attr)
        setattr(owner, attr, lambda *a, **k: None)
    try:
        yield
    finally:
        for (owner, attr), f in saved.items():
            setattr(owner, attr, f)


def build(name, classes, in_channels):
    if name in SMALL:
        return SMALL[name](classes, in_channels)
    import torch_models
    return torch_models.build(name, classes, in_channels, 0.5)


def runs(model, in_channels, size, batch):
    """Whether a training-mode forward of `batch` images runs (eval mode is never stricter:
    shape errors are the same, and only training-mode BatchNorm needs more than one value)."""
    try:
        with torch.no_grad():
            model(torch.zeros(batch, in_channels, size, size))
        return True
    except (RuntimeError, ValueError):
        return False


def min_size(model, in_channels, batch):
    model.train()
    hi = 1
    while not runs(model, in_channels, hi, batch):  # doubling keeps the tried sizes small
        hi *= 2
        if hi > 1024:
            sys.exit(f"model_names.py: {model.__class__.__name__} does not run up to 1024")
    lo = hi // 2 + 1 if hi > 1 else 1
    while lo < hi:
        mid = (lo + hi) // 2
        if runs(model, in_channels, mid, batch):
            hi = mid
        else:
            lo = mid + 1
    # The search assumes "runs" is monotone in the size; check the neighbourhood.
    if lo > 1 and runs(model, in_channels, lo - 1, batch):
        sys.exit(f"model_names.py: {model.__class__.__name__} runs below {lo}")
    return lo


def forward_macs(model, in_channels, size, batch):
    """Multiply-adds per image of a training-mode forward: every Conv2d's output elements x
    (its input channels / groups) x kernel taps, every Linear's in x out features."""
    total = [0]

    def hook(mod, inputs, out):
        if isinstance(mod, nn.Conv2d):
            taps = mod.kernel_size[0] * mod.kernel_size[1]
            total[0] += out.numel() // out.shape[0] * (mod.in_channels // mod.groups) * taps
        else:
            total[0] += mod.in_features * mod.out_features * (out.numel() // out.shape[-1] // out.shape[0])

    handles = [m.register_forward_hook(hook) for m in model.modules()
               if isinstance(m, (nn.Conv2d, nn.Linear))]
    model.train()
    with torch.no_grad():
        model(torch.zeros(batch, in_channels, size, size))
    for h in handles:
        h.remove()
    return total[0]


def main():
    classes, in_channels = int(sys.argv[1]), int(sys.argv[2])
    torch.set_num_threads(1)
    out = []
    for arg in sys.argv[3:]:
        name, batch = arg.split(":")
        with no_init():
            model = build(name, classes, in_channels)
        out.append(f"model {name}")
        out.append(f"params {sum(p.numel() for p in model.parameters())}")
        size = min_size(model, in_channels, int(batch))
        out.append(f"min_size {size}")
        out.append(f"macs {forward_macs(model, in_channels, size, int(batch))}")
        for key, t in model.state_dict().items():
            out.append(" ".join(["entry", key] + [str(d) for d in t.shape]))
        out.append("end")
    print("\n".join(out))


if __name__ == "__main__":
    main()
