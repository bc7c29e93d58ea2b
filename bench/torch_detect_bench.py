"""PyTorch side of bench/compare_detect.sh: torchvision 0.14's FasterRCNN over
resnet_fpn_backbone (FrozenBatchNorm2d, trainable_layers 3), the same synthetic images,
targets, step (forward, losses, backward, SGD) and threads as bench/detect_bench.cpp; prints
images/s (median step) and peak memory in the same format."""
import argparse
import resource
import time

import torch
from torchvision.models.detection import FasterRCNN
from torchvision.models.detection.backbone_utils import resnet_fpn_backbone

p = argparse.ArgumentParser()
p.add_argument("--model", default="fasterrcnn_resnet18_fpn")
p.add_argument("--mode", default="train", choices=["train", "infer"])
p.add_argument("--size", type=int, default=320)
p.add_argument("--batch", type=int, default=2)
p.add_argument("--steps", type=int, default=5)
p.add_argument("--warmup", type=int, default=2)
p.add_argument("--threads", type=int, default=2)
a = p.parse_args()

torch.set_num_threads(a.threads)
body = a.model[len("fasterrcnn_"):-len("_fpn")]
model = FasterRCNN(resnet_fpn_backbone(backbone_name=body, weights=None, trainable_layers=3),
                   num_classes=4, min_size=a.size)
model.train(a.mode == "train")
s = float(a.size)
images = [torch.rand(3, a.size, a.size) for _ in range(a.batch)]
box = torch.tensor([[0.1, 0.1, 0.4, 0.5], [0.5, 0.2, 0.9, 0.6], [0.3, 0.6, 0.6, 0.95]]) * s
targets = [{"boxes": box.clone(), "labels": torch.tensor([1, 2, 3])} for _ in range(a.batch)]
opt = torch.optim.SGD([q for q in model.parameters() if q.requires_grad], lr=1e-3, momentum=0.9,
                      weight_decay=1e-4)
times = []
for step in range(a.warmup + a.steps):
    t0 = time.perf_counter()
    if a.mode == "train":
        loss = sum(model(images, targets).values())
        opt.zero_grad()
        loss.backward()
        opt.step()
    else:
        with torch.no_grad():
            model(images)
    if step >= a.warmup:
        times.append(time.perf_counter() - t0)
times.sort()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(f"engine=torch model={a.model} mode={a.mode} size={a.size} batch={a.batch} "
      f"threads={a.threads} images_per_s={a.batch / times[len(times) // 2]:.3f} peak_rss_mb={peak:.1f}")
