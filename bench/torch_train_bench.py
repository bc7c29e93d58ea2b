"""PyTorch side of bench/compare_train.sh: the same model, synthetic batch, thread count and
step (forward, cross-entropy, backward, SGD with momentum) as bench/train_bench.cpp; prints
images/s (median step) and this process's peak memory in the same format."""
import argparse
import contextlib
import resource
import sys
import time

import torch
import torch.nn.functional as F
import torchvision

p = argparse.ArgumentParser()
p.add_argument("--model", default="resnet18")
p.add_argument("--mode", default="train", choices=["train", "infer"])
p.add_argument("--size", type=int, default=32)
p.add_argument("--batch", type=int, default=64)
p.add_argument("--steps", type=int, default=10)
p.add_argument("--warmup", type=int, default=3)
p.add_argument("--threads", type=int, default=2)
p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
p.add_argument("--precision", default="fp32", choices=["fp32", "tf32", "bf16", "fp16"])
p.add_argument("--channels-last", action="store_true")
a = p.parse_args()

torch.set_num_threads(a.threads)
cuda = a.device == "cuda"
if cuda:  # tf32 for tf32 and for the mixed modes (as our engine runs their other math)
    torch.backends.cuda.matmul.allow_tf32 = a.precision != "fp32"
    torch.backends.cudnn.allow_tf32 = a.precision != "fp32"
    torch.backends.cudnn.benchmark = True
fmt = torch.channels_last if a.channels_last else torch.contiguous_format
model = torchvision.models.__dict__[a.model](num_classes=1000).to(a.device, memory_format=fmt)
model.train(a.mode == "train")
x = torch.randn(a.batch, 3, a.size, a.size, device=a.device).to(memory_format=fmt)
t = torch.randint(0, 1000, (a.batch,), device=a.device)
amp = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(a.precision)
scaler = torch.cuda.amp.GradScaler(enabled=cuda and a.precision == "fp16")
autocast = (lambda: torch.autocast(a.device, dtype=amp)) if amp else contextlib.nullcontext
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
times = []
for s in range(a.warmup + a.steps):
    start = time.perf_counter()
    if a.mode == "train":
        opt.zero_grad(set_to_none=True)
        with autocast():
            out = model(x)
            # Inception v3 and GoogLeNet return their auxiliary heads' logits in training:
            # weighted as torchvision's reference recipe (0.4; 0.3 each), as our trainer does.
            if isinstance(out, torchvision.models.InceptionOutputs):
                loss = F.cross_entropy(out.logits, t) + 0.4 * F.cross_entropy(out.aux_logits, t)
            elif isinstance(out, torchvision.models.GoogLeNetOutputs):
                loss = F.cross_entropy(out.logits, t) + 0.3 * (
                    F.cross_entropy(out.aux_logits1, t) + F.cross_entropy(out.aux_logits2, t))
            else:
                loss = F.cross_entropy(out, t)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    else:
        with torch.inference_mode(), autocast():
            model(x)
    if cuda:
        torch.cuda.synchronize()
    if s >= a.warmup:
        times.append(time.perf_counter() - start)
times.sort()
median = times[len(times) // 2]
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
print("engine=pytorch model=%s mode=%s size=%d batch=%d threads=%d images_per_s=%.2f "
      "peak_rss_mb=%.1f" % (a.model, a.mode, a.size, a.batch, a.threads, a.batch / median, rss))
sys.stdout.flush()
