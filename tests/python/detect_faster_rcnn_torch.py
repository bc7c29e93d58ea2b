"""PyTorch reference for tests/test_detect_faster_rcnn.cpp: a whole torchvision 0.14 FasterRCNN
over resnet_fpn_backbone (FrozenBatchNorm2d with random statistics), small images, the fg/bg
samplers' torch.randperm replaced by the first-k rule (SampleRule::kFirst). Training mode:
the four losses and every trainable parameter's gradient; eval mode: the detections.
Not a test by itself.

usage: detect_faster_rcnn_torch.py OUT.safetensors BODY SEED
Writes "init.NAME" (state dict), "image.K" (3, H, W) in [0, 1], "boxes.K", "labels.K" (the
targets, original coordinates), "loss.NAME", "grad.NAME", and "det_boxes.K", "det_scores.K",
"det_labels.K" (eval, original coordinates).
"""
import os
import sys

import torch
from torchvision.models.detection import FasterRCNN
from torchvision.models.detection.backbone_utils import resnet_fpn_backbone
from torchvision.ops import MultiScaleRoIAlign

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402
from detect_rpn_torch import first_k_sampler  # noqa: E402

NUM_CLASSES = 4
SIZES = [(60, 80), (72, 64)]


def main():
    out, body, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
    torch.manual_seed(seed)
    backbone = resnet_fpn_backbone(backbone_name=body, weights=None, trainable_layers=3)
    # Every anchor sampled and a small canonical RoI scale: every FPN level gets a gradient
    # (first-k of 256 would take level '0''s anchors only, and 64-pixel images' rois all map to
    # level '0' at torchvision's 224).
    pool = MultiScaleRoIAlign(["0", "1", "2", "3"], 7, 2, canonical_scale=32)
    model = FasterRCNN(backbone, num_classes=NUM_CLASSES, min_size=64, max_size=96,
                       rpn_batch_size_per_image=100000, box_batch_size_per_image=128,
                       box_roi_pool=pool)
    model.rpn.fg_bg_sampler = first_k_sampler(100000, 0.5)
    model.roi_heads.fg_bg_sampler = first_k_sampler(128, 0.25)
    with torch.no_grad():
        for name, buf in model.named_buffers():  # FrozenBatchNorm2d statistics
            if name.endswith("running_var"):
                buf.uniform_(0.5, 2.0)
            elif name.endswith("weight"):
                buf.uniform_(0.5, 1.5)
            elif name.endswith("bias") or name.endswith("running_mean"):
                buf.uniform_(-0.2, 0.2)
    images = [torch.rand(3, h, w) for h, w in SIZES]
    targets = []
    for h, w in SIZES:
        xy = torch.rand(3, 2) * torch.tensor([w * 0.5, h * 0.5])
        wh = 12 + torch.rand(3, 2) * 24
        boxes = torch.cat([xy, torch.minimum(xy + wh, torch.tensor([w - 1.0, h - 1.0]))], dim=1)
        targets.append({"boxes": boxes, "labels": torch.randint(1, NUM_CLASSES, (3,))})
    result = {"init." + k: v.clone() for k, v in model.state_dict().items()}
    for k, (img, t) in enumerate(zip(images, targets)):
        result[f"image.{k}"] = img
        result[f"boxes.{k}"] = t["boxes"]
        result[f"labels.{k}"] = t["labels"]
    model.train()
    captured = {}

    def keep_proposals(module, inputs, output):  # returns None: the output stays as it is
        captured["proposals"] = [b.detach().clone() for b in output[0]]

    model.rpn.register_forward_hook(keep_proposals)
    losses = model(images, targets)
    for k, b in enumerate(captured["proposals"]):
        result[f"proposals.{k}"] = b
    sum(losses.values()).backward()
    for k, v in losses.items():
        result["loss." + k] = v.detach().reshape(1)
    for name, p in model.named_parameters():
        if p.requires_grad:
            result["grad." + name] = p.grad
    model.eval()
    with torch.no_grad():
        # Larger classifier weights: scores spread, so score_thresh and NMS matter.
        model.roi_heads.box_predictor.cls_score.weight.mul_(20)
        result["eval.cls_score.weight"] = model.roi_heads.box_predictor.cls_score.weight.clone()
        dets = model(images)
    for k, d in enumerate(dets):
        result[f"det_boxes.{k}"] = d["boxes"]
        result[f"det_scores.{k}"] = d["scores"]
        result[f"det_labels.{k}"] = d["labels"]
    st.save(out, result)


if __name__ == "__main__":
    main()
