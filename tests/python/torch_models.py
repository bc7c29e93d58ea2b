"""The PyTorch counterpart of every model in mpicnn's registry, built with the same options:
torchvision 0.14 models as they are, and our small nets (no torchvision equivalent) defined
here exactly as src/models/small.cpp builds them."""
import torch
import torchvision

_DROPOUT = ("alexnet", "vgg", "squeezenet", "inception_v3", "googlenet")
# Models with auxiliary classifiers: built with them (aux_logits=True, torchvision's default
# for weights=None) and torchvision's init stated, as the engine builds them. In train mode
# they return a namedtuple of (logits, aux logits...): see AUX_WEIGHTS.
_AUX = ("inception_v3", "googlenet")
# The reference recipe's loss weight of each auxiliary output, by its namedtuple field
# (torchvision's InceptionOutputs and GoogLeNetOutputs): loss = main + sum weight * aux.
AUX_WEIGHTS = {"aux_logits": 0.4, "aux_logits1": 0.3, "aux_logits2": 0.3}


def build(name, num_classes, in_channels=3, dropout=0.0):
    if name in SMALL:
        return SMALL[name](num_classes, in_channels)
    kwargs = {"num_classes": num_classes}
    if name.startswith(_DROPOUT):
        kwargs["dropout"] = dropout
    if name in _AUX:
        kwargs.update(aux_logits=True, init_weights=True)
    if name == "googlenet":
        kwargs["dropout_aux"] = dropout  # the engine's ModelOptions::aux_dropout, set alike
    model = torchvision.models.__dict__[name](**kwargs)
    if in_channels != 3:
        # The first convolution takes in_channels, everything else unchanged (what the
        # engine's in_channels option builds).
        parent, attr, conv = _first_conv(model)
        new = torch.nn.Conv2d(in_channels, conv.out_channels, conv.kernel_size, conv.stride,
                              conv.padding, conv.dilation, conv.groups, conv.bias is not None)
        setattr(parent, attr, new)
    return model


def logits_and_aux(out):
    """A model's output as (main logits, [(weight, aux logits), ...]): the namedtuple of a
    model with auxiliary heads in train mode, or plain logits."""
    if isinstance(out, torch.Tensor):
        return out, []
    return out[0], [(AUX_WEIGHTS[f], getattr(out, f)) for f in out._fields[1:]]


def total_loss(out, target):
    """Cross-entropy of the main logits plus the weighted cross-entropy of each auxiliary
    output (torchvision's reference recipe: + 0.4 aux for Inception v3, + 0.3 (aux1 + aux2)
    for GoogLeNet); the main logits alone for other models."""
    logits, aux = logits_and_aux(out)
    loss = torch.nn.functional.cross_entropy(logits, target)
    for weight, a in aux:
        loss = loss + weight * torch.nn.functional.cross_entropy(a, target)
    return logits, loss


def _first_conv(model):
    for parent in model.modules():
        for attr, child in parent.named_children():
            if isinstance(child, torch.nn.Conv2d):
                return parent, attr, child
    raise ValueError("no convolution")


# Our small nets (no torchvision equivalent), defined as src/models/small.cpp builds them.
from model_names import SMALL  # noqa: E402  (tests/python/model_names.py defines them)
