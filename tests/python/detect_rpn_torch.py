"""PyTorch reference for tests/test_detect_rpn.cpp: torchvision 0.14's RegionProposalNetwork
after its head (anchors, filter_proposals in training and eval mode, assign_targets_to_anchors,
compute_loss and the gradients of both losses) on random head outputs, with the fg/bg
sampler's torch.randperm replaced by the deterministic first-k rule our SampleRule::kFirst
implements. Not a test by itself.

usage: detect_rpn_torch.py OUT.safetensors SEED BATCH_PER_IMAGE
Writes "obj.L", "deltas.L" (the head outputs), "anchors", "gt.K", "proposals_train.K",
"proposals_eval.K", "loss_objectness", "loss_rpn_box_reg", "dobj.L", "ddeltas.L".
"""
import os
import sys

import torch
from torchvision.models.detection.anchor_utils import AnchorGenerator
from torchvision.models.detection.image_list import ImageList
from torchvision.models.detection.rpn import RegionProposalNetwork, concat_box_prediction_layers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402

PADDED = (128, 160)
IMAGE_SIZES = [(120, 160), (128, 150)]
GRIDS = [(32, 40), (16, 20), (8, 10), (4, 5), (2, 3)]


def first_k_sampler(batch_size_per_image, positive_fraction):
    """BalancedPositiveNegativeSampler with arange in place of randperm."""
    def sample(labels):
        pos_masks, neg_masks = [], []
        for m in labels:
            positive = torch.where(m >= 1)[0]
            negative = torch.where(m == 0)[0]
            num_pos = min(positive.numel(), int(batch_size_per_image * positive_fraction))
            num_neg = min(negative.numel(), batch_size_per_image - num_pos)
            pos_mask = torch.zeros_like(m, dtype=torch.uint8)
            neg_mask = torch.zeros_like(m, dtype=torch.uint8)
            pos_mask[positive[:num_pos]] = 1
            neg_mask[negative[:num_neg]] = 1
            pos_masks.append(pos_mask)
            neg_masks.append(neg_mask)
        return pos_masks, neg_masks
    return sample


def main():
    out, seed, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    torch.manual_seed(seed)
    gen = AnchorGenerator(((32,), (64,), (128,), (256,), (512,)), ((0.5, 1.0, 2.0),) * 5)
    rpn = RegionProposalNetwork(gen, None, 0.7, 0.3, batch, 0.5,
                                dict(training=300, testing=200), dict(training=100, testing=50),
                                0.7)
    rpn.fg_bg_sampler = first_k_sampler(batch, 0.5)
    n, a = len(IMAGE_SIZES), 3
    obj = [(2 * torch.randn(n, a, h, w)).requires_grad_() for h, w in GRIDS]
    deltas = [(0.5 * torch.randn(n, 4 * a, h, w)).requires_grad_() for h, w in GRIDS]
    images = ImageList(torch.zeros(n, 3, *PADDED), IMAGE_SIZES)
    features = [torch.zeros(n, 1, h, w) for h, w in GRIDS]
    anchors = rpn.anchor_generator(images, features)
    gts = []
    for k, (h, w) in enumerate(IMAGE_SIZES):
        count = 3 if k == 0 else 2
        xy = torch.rand(count, 2) * torch.tensor([w * 0.6, h * 0.6])
        wh = 16 + torch.rand(count, 2) * 64
        gts.append(torch.cat([xy, torch.minimum(xy + wh, torch.tensor([w, h]))], dim=1))
    targets = [{"boxes": g} for g in gts]

    num_anchors_per_level = [o[0].numel() for o in obj]
    obj_flat, deltas_flat = concat_box_prediction_layers(obj, deltas)
    proposals = rpn.box_coder.decode(deltas_flat.detach(), anchors).view(n, -1, 4)
    result = {}
    for mode in ("train", "eval"):
        rpn.train(mode == "train")
        boxes, _ = rpn.filter_proposals(proposals, obj_flat, images.image_sizes,
                                        num_anchors_per_level)
        for k, b in enumerate(boxes):
            result[f"proposals_{mode}.{k}"] = b
    rpn.train()
    labels, matched = rpn.assign_targets_to_anchors(anchors, targets)
    regression_targets = rpn.box_coder.encode(matched, anchors)
    loss_obj, loss_box = rpn.compute_loss(obj_flat, deltas_flat, labels, regression_targets)
    (loss_obj + loss_box).backward()
    result["anchors"] = anchors[0]
    result["loss_objectness"] = loss_obj.reshape(1)
    result["loss_rpn_box_reg"] = loss_box.reshape(1)
    result["positives"] = torch.tensor([int((l == 1).sum()) for l in labels], dtype=torch.int64)
    for k, g in enumerate(gts):
        result[f"gt.{k}"] = g
    for l in range(len(GRIDS)):
        result[f"obj.{l}"] = obj[l]
        result[f"deltas.{l}"] = deltas[l]
        result[f"dobj.{l}"] = obj[l].grad
        result[f"ddeltas.{l}"] = deltas[l].grad
    st.save(out, result)


if __name__ == "__main__":
    main()
