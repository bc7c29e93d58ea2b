"""PyTorch reference for tests/test_detect_roi_heads.cpp: torchvision 0.14's RoIHeads (box branch)
on small sizes (16 channels, representation 32, 4 classes, 4 FPN levels, a batch of 2 images),
with the fg/bg sampler's torch.randperm replaced by the deterministic first-k rule our
SampleRule::kFirst implements. Not a test by itself: the C++ test compares.

usage: detect_roi_heads_torch.py OUT.safetensors MODE SEED
MODE train: select_training_samples, fastrcnn_loss and the gradients of
            W_CLS * loss_classifier + W_BOX * loss_box_reg (image 1 has no gt boxes with
            MODE train_empty). eval: postprocess_detections.
Writes "init.NAME" (roi_heads.* state dict), "feat.L", "image_sizes", "proposals.K",
"gt_boxes.K", "gt_labels.K"; train: "rois", "labels", "matched", "regression_targets",
"class_logits", "box_regression", "loss_classifier", "loss_box_reg", "grad.NAME", "dfeat.L";
eval: "class_logits", "box_regression", "boxes.K", "scores.K", "labels.K".
"""
import os
import sys
from collections import OrderedDict

import torch
from torchvision.models.detection.faster_rcnn import FastRCNNPredictor, TwoMLPHead
from torchvision.models.detection.roi_heads import RoIHeads
from torchvision.ops import MultiScaleRoIAlign

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402
from detect_rpn_torch import first_k_sampler  # noqa: E402

C, REP, CLASSES, BATCH, FRACTION, CANONICAL = 16, 32, 4, 32, 0.25, 32
PADDED = (128, 160)
IMAGE_SIZES = [(120, 160), (128, 150)]
GRIDS = [(32, 40), (16, 20), (8, 10), (4, 5)]
W_CLS, W_BOX = 0.7, 1.3
PROPOSALS = 60


def random_boxes(count, h, w, min_side, max_side):
    side = min_side * (max_side / min_side) ** torch.rand(count, 2)
    ctr = torch.rand(count, 2) * torch.tensor([w, h])
    lo = torch.maximum(ctr - side / 2, torch.zeros(2))
    hi = torch.minimum(ctr + side / 2, torch.tensor([float(w), float(h)]))
    return torch.cat([lo, hi], dim=1)


def main():
    out, mode, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
    torch.manual_seed(seed)
    pool = MultiScaleRoIAlign(["0", "1", "2", "3"], 7, 2, canonical_scale=CANONICAL)
    heads = RoIHeads(pool, TwoMLPHead(C * 49, REP), FastRCNNPredictor(REP, CLASSES),
                     0.5, 0.5, BATCH, FRACTION, None, 0.05, 0.5, 100)
    heads.fg_bg_sampler = first_k_sampler(BATCH, FRACTION)
    with torch.no_grad():  # spread the class scores so score_thresh has work to do
        heads.box_predictor.cls_score.weight.mul_(40.0)
        heads.box_predictor.bbox_pred.weight.mul_(4.0)
    n = len(IMAGE_SIZES)
    feats = [torch.randn(n, C, h, w).requires_grad_() for h, w in GRIDS]
    features = OrderedDict((str(k), f) for k, f in enumerate(feats))
    gts, gt_labels, proposals = [], [], []
    for k, (h, w) in enumerate(IMAGE_SIZES):
        count = 0 if (mode == "train_empty" and k == 1) else (3 if k == 0 else 2)
        g = random_boxes(count, h, w, 12.0, 100.0)
        labels = torch.randint(1, CLASSES, (count,), dtype=torch.int64)
        # A third of the proposals jitter the gt boxes (IoU around 0.5 either side), the rest
        # anywhere, of sizes that reach every FPN level.
        near = PROPOSALS // 3 if count else 0
        pick = g[torch.randint(0, max(count, 1), (near,))] if count else torch.zeros(0, 4)
        ctr = (pick[:, :2] + pick[:, 2:]) / 2
        side = pick[:, 2:] - pick[:, :2]
        ctr = ctr + side * 0.15 * torch.randn(near, 2)
        side = side * torch.exp(0.25 * torch.randn(near, 2))
        jitter = torch.cat([(ctr - side / 2).clamp(min=0),
                            torch.minimum(ctr + side / 2, torch.tensor([float(w), float(h)]))], dim=1)
        p = torch.cat([jitter, random_boxes(PROPOSALS - near, h, w, 6.0, 150.0)])
        p = p[torch.randperm(p.shape[0])]
        gts.append(g)
        gt_labels.append(labels)
        proposals.append(p)
    tensors = {"init.roi_heads." + k: v.clone() for k, v in heads.state_dict().items()}
    for k, f in enumerate(feats):
        tensors[f"feat.{k}"] = f
    tensors["image_sizes"] = torch.tensor(IMAGE_SIZES, dtype=torch.int64)
    for k in range(n):
        tensors[f"proposals.{k}"] = proposals[k]
        tensors[f"gt_boxes.{k}"] = gts[k]
        tensors[f"gt_labels.{k}"] = gt_labels[k]
    captured = {}
    heads.box_predictor.register_forward_hook(
        lambda mod, inp, outs: captured.update(class_logits=outs[0], box_regression=outs[1]))
    targets = [{"boxes": g, "labels": l} for g, l in zip(gts, gt_labels)]

    if mode.startswith("train"):
        heads.train()
        sampled, matched, labels, regression = heads.select_training_samples(
            [p.clone() for p in proposals], targets)
        rois = torch.cat([torch.cat([torch.full((len(s), 1), float(k)), s], dim=1)
                          for k, s in enumerate(sampled)])
        _, losses = heads(features, proposals, IMAGE_SIZES, targets)
        total = W_CLS * losses["loss_classifier"] + W_BOX * losses["loss_box_reg"]
        total.backward()
        tensors.update(rois=rois, labels=torch.cat(labels), matched=torch.cat(matched),
                       regression_targets=torch.cat(regression),
                       loss_classifier=losses["loss_classifier"].reshape(1),
                       loss_box_reg=losses["loss_box_reg"].reshape(1),
                       w=torch.tensor([W_CLS, W_BOX]))
        for name, p in heads.named_parameters():
            tensors["grad.roi_heads." + name] = p.grad
        for k, f in enumerate(feats):
            tensors[f"dfeat.{k}"] = f.grad
    else:
        heads.eval()
        with torch.no_grad():
            result, _ = heads(features, proposals, IMAGE_SIZES)
        for k, r in enumerate(result):
            tensors[f"boxes.{k}"] = r["boxes"]
            tensors[f"scores.{k}"] = r["scores"]
            tensors[f"labels.{k}"] = r["labels"]
    tensors["class_logits"] = captured["class_logits"]
    tensors["box_regression"] = captured["box_regression"]
    st.save(out, tensors)


if __name__ == "__main__":
    main()
