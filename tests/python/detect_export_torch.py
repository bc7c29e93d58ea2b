"""Fixture for tests/test_detect_faster_rcnn.cpp: a torchvision 0.14 FasterRCNN state dict as a
user exports one to fine-tune from, here over a ResNet-18 FPN with trainable BatchNorm2d (as
torchvision builds it without pretrained weights: the counters are saved), random weights.

usage: detect_export_torch.py OUT.safetensors NUM_CLASSES SEED
"""
import os
import sys

import torch
from torch import nn
from torchvision.models.detection import FasterRCNN
from torchvision.models.detection.backbone_utils import resnet_fpn_backbone

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402

out, classes, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
torch.manual_seed(seed)
backbone = resnet_fpn_backbone(backbone_name="resnet18", weights=None, trainable_layers=5,
                               norm_layer=nn.BatchNorm2d)
st.save(out, FasterRCNN(backbone, num_classes=classes).state_dict())
