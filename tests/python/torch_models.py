"""The PyTorch counterpart of every model in mpicnn's registry, built with the same options:
torchvision 0.14 models as they are, and our small nets (no torchvision equivalent) defined
here exactly as src/models/small.cpp builds them."""
import torch
import torchvision

_DROPOUT = ("alexnet", "vgg", "squeezenet")


def build(name, num_classes, in_channels=3, dropout=0.0):
    if name in SMALL:
        return SMALL[name](num_classes, in_channels)
    kwargs = {"num_classes": num_classes}
    if name.startswith(_DROPOUT):
        kwargs["dropout"] = dropout
    model = torchvision.models.__dict__[name](**kwargs)
    if in_channels != 3:
        # The first convolution takes in_channels, everything else unchanged (what the
        # engine's in_channels option builds).
        parent, attr, conv = _first_conv(model)
        new = torch.nn.Conv2d(in_channels, conv.out_channels, conv.kernel_size, conv.stride,
                              conv.padding, conv.dilation, conv.groups, conv.bias is not None)
        setattr(parent, attr, new)
    return model


def _first_conv(model):
    for parent in model.modules():
        for attr, child in parent.named_children():
            if isinstance(child, torch.nn.Conv2d):
                return parent, attr, child
    raise ValueError("no convolution")


# Our small nets (no torchvision equivalent), defined as src/models/small.cpp builds them.
from model_names import SMALL  # noqa: E402  (tests/python/model_names.py defines them)
