#!/usr/bin/env python3
"""torchvision's top-1 predictions on a list of images: a reference for mpicnn's evaluation.
Not a test by itself: it writes what torchvision predicts, and the caller compares and decides.

Usage: torchvision_predict.py --model NAME --weights FILE.safetensors --num-classes N
                              --images LIST.txt -o OUT.csv [--size 224] [--resize 256]
                              [--batch 16]
       torchvision_predict.py --make-model OUT.pth --model NAME --num-classes N
                              --images LIST.txt [-o OUT.csv] [--seed 0] [--logit-spread 10]
                              [--size 224] [--resize 256] [--batch 16]

Builds torchvision.models.NAME(num_classes=N), loads FILE.safetensors with
load_state_dict(strict=True) (read by st.py, next to this script), eval mode, and runs
torchvision's eval transform on each image exactly:
  PIL.Image.open(p).convert("RGB"), Resize(resize) (bilinear, PIL), CenterCrop(size),
  ToTensor(), Normalize(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225)).
LIST.txt holds one image path per line (blank lines skipped); a relative path is taken as
given (from the working directory), or else from LIST.txt's folder when only that exists.
OUT.csv: header "path,prediction,score,margin", one row per image in list order; path as
written in LIST.txt, prediction = top-1 class index, score = its softmax probability,
margin = top-1 minus top-2 probability (the top-1 probability when N == 1); 6 significant
digits. Uses 2 CPU threads.

--make-model OUT.pth (instead of --weights and -o) makes a model worth comparing predictions
with: a randomly initialised network gives every image the same class by tiny margins, which
proves little. It builds torchvision.models.NAME(num_classes=N) after torch.manual_seed(seed),
eval mode, and computes the penultimate features of every listed image (the input of the
final nn.Linear `fc`: resnets, resnext, wide_resnet, regnet, shufflenet, googlenet,
inception_v3; other models are refused with a message), with the same eval transform as
above. It then picks N prototype images spread over the set, deterministically: centre the
features on their mean m and L2-normalise them (u_i); the first prototype is the image whose
centred feature is longest, each next one the image farthest (Euclidean, on u) from all chosen
so far (ties: the first in list order). Class c's row is fc.weight[c] = scale * u_proto(c),
fc.bias[c] = -fc.weight[c] . m, so the logit of class c is scale times the projection of the
image's centred feature on prototype c's direction. `scale` makes the median over images of
(largest logit - smallest logit) equal to --logit-spread (default 10). Everything else keeps
its random initialisation. Writes torch.save(model.state_dict(), OUT.pth) (convert it with
data_tools/export_torchvision.py --weights OUT.pth) and prints one summary line: distinct
top-1 classes over the images, min / median top-1 minus top-2 probability. With -o OUT.csv it
also writes the model's predictions there (the CSV above), from the features it computed: what
prediction mode gives on the saved weights, without a second pass. N must not exceed
the number of images. Errors: one line on stderr starting "torchvision_predict: ", status 1.
"""
import argparse
import csv
import os
import sys

import torch
import torchvision
from PIL import Image
from torchvision import transforms

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


def read_list(path):
    base = os.path.dirname(os.path.abspath(path))
    items = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            name = line.rstrip("\r\n")
            if not name.strip():
                continue
            found = name
            if not os.path.isabs(name) and not os.path.exists(name):
                alt = os.path.join(base, name)
                if os.path.exists(alt):
                    found = alt
            items.append((name, found))
    return items


def eval_transform(args):
    return transforms.Compose([
        transforms.Resize(args.resize, interpolation=transforms.InterpolationMode.BILINEAR),
        transforms.CenterCrop(args.size),
        transforms.ToTensor(),
        transforms.Normalize(MEAN, STD),
    ])


def fail(msg):
    print(f"torchvision_predict: {msg}", file=sys.stderr)
    return 1


def penultimate_features(model, fc, items, transform, batch_size):
    """The input of `fc` for every image, in list order: float32 tensor (images, features)."""
    captured = []

    def hook(_module, inputs):
        captured.append(inputs[0].detach().reshape(inputs[0].shape[0], -1).clone())

    handle = fc.register_forward_pre_hook(hook)
    try:
        with torch.no_grad():
            for start in range(0, len(items), batch_size):
                batch = []
                for _, found in items[start:start + batch_size]:
                    with Image.open(found) as im:
                        batch.append(transform(im.convert("RGB")))
                model(torch.stack(batch))
    finally:
        handle.remove()
    return torch.cat(captured, dim=0)


def spread_prototypes(unit, first, count):
    """Farthest-point selection: `first`, then repeatedly the row of `unit` farthest from all
    chosen rows (ties: the lowest index)."""
    chosen = [first]
    dist = (unit - unit[first]).norm(dim=1)
    for _ in range(count - 1):
        nxt = int(torch.argmax(dist))  # first maximum on ties
        chosen.append(nxt)
        dist = torch.minimum(dist, (unit - unit[nxt]).norm(dim=1))
    return chosen


def write_predictions(path, names, prob):
    """OUT.csv from (images, classes) probabilities: top-1 class, its score and margin."""
    k = min(2, prob.shape[1])
    top, idx = prob.topk(k, dim=1)
    tmp = path + ".tmp"
    with open(tmp, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(("path", "prediction", "score", "margin"))
        for i, name in enumerate(names):
            score = top[i, 0].item()
            margin = score - top[i, 1].item() if k > 1 else score
            w.writerow((name, int(idx[i, 0]), f"{score:.6g}", f"{margin:.6g}"))
    os.replace(tmp, path)


def make_model(args):
    if args.weights is not None:
        return fail("--make-model takes no --weights (it writes OUT.pth)")
    if args.num_classes < 1:
        return fail(f"--num-classes must be at least 1, got {args.num_classes}")
    items = read_list(args.images)
    if len(items) < args.num_classes:
        return fail(f"--make-model needs at least as many images as classes: "
                    f"{len(items)} image(s) in '{args.images}', {args.num_classes} classes")
    missing = next((name for name, found in items if not os.path.isfile(found)), None)
    if missing is not None:
        return fail(f"cannot read image '{missing}' listed in '{args.images}'")
    if not args.logit_spread > 0:
        return fail(f"--logit-spread must be positive, got {args.logit_spread}")
    builder = getattr(torchvision.models, args.model, None)
    if builder is None or not callable(builder):
        return fail(f"unknown model '{args.model}' (not in torchvision.models)")

    torch.manual_seed(args.seed)
    model = builder(num_classes=args.num_classes)
    model.eval()
    fc = getattr(model, "fc", None)
    if not isinstance(fc, torch.nn.Linear):
        return fail(f"--make-model supports only models whose classifier is a final "
                    f"nn.Linear named 'fc' (resnet, resnext, regnet, shufflenet, ...); "
                    f"{args.model} has none")
    if fc.out_features != args.num_classes:
        return fail(f"{args.model}.fc has {fc.out_features} outputs, not {args.num_classes}")

    feats = penultimate_features(model, fc, items, eval_transform(args), args.batch).double()
    if feats.shape[1] != fc.in_features:
        return fail(f"{args.model}: the input of fc has {feats.shape[1]} values per image, "
                    f"fc expects {fc.in_features}")
    mean = feats.mean(dim=0)
    centred = feats - mean
    norms = centred.norm(dim=1)
    if float(norms.max()) == 0.0 and args.num_classes > 1:
        return fail("every image has the same penultimate features; cannot spread classes")
    unit = centred / norms.clamp_min(1e-12).unsqueeze(1)
    protos = spread_prototypes(unit, int(torch.argmax(norms)), args.num_classes)
    directions = unit[protos]                       # (classes, features), unit rows
    raw = centred @ directions.t()                  # logits at scale 1, bias included
    spread = (raw.max(dim=1).values - raw.min(dim=1).values).median()
    if args.num_classes == 1 or float(spread) <= 0.0:
        scale = args.logit_spread
    else:
        scale = args.logit_spread / float(spread)
    weight = scale * directions
    bias = -(weight @ mean)
    with torch.no_grad():
        fc.weight.copy_(weight.to(fc.weight.dtype))
        fc.bias.copy_(bias.to(fc.bias.dtype))

    # What the float32 model now predicts on these images (from the captured features).
    with torch.no_grad():
        logits = fc(feats.float()).double()
    prob = torch.softmax(logits, dim=1)
    k = min(2, prob.shape[1])
    top, idx = prob.topk(k, dim=1)
    margin = (top[:, 0] - top[:, 1] if k > 1 else top[:, 0]).sort().values
    half = len(margin) // 2
    median = float(margin[half] if len(margin) % 2 else (margin[half - 1] + margin[half]) / 2)

    folder = os.path.dirname(os.path.abspath(args.make_model))
    if not os.path.isdir(folder):
        return fail(f"cannot write '{args.make_model}': folder '{folder}' does not exist")
    tmp = args.make_model + ".tmp"
    torch.save(model.state_dict(), tmp)
    os.replace(tmp, args.make_model)
    if args.output is not None:
        write_predictions(args.output, [name for name, _ in items], prob)
    print(f"{args.make_model}: {args.model}, {args.num_classes} classes, seed {args.seed}, "
          f"scale {scale:.6g}; on {len(items)} images: "
          f"{len(set(idx[:, 0].tolist()))} distinct top-1 classes, "
          f"margin min {float(margin[0]):.4g} median {median:.4g}")
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--weights", metavar="FILE.safetensors",
                   help="prediction mode (required unless --make-model)")
    p.add_argument("--num-classes", type=int, required=True)
    p.add_argument("--images", required=True, metavar="LIST.txt")
    p.add_argument("-o", "--output", metavar="OUT.csv",
                   help="the predictions (required in prediction mode; with --make-model, "
                        "the made model's)")
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--resize", type=int, default=256)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--make-model", metavar="OUT.pth",
                   help="write a model whose top-1 classes vary over the images (see above)")
    p.add_argument("--seed", type=int, default=0, help="--make-model: torch.manual_seed")
    p.add_argument("--logit-spread", type=float, default=10.0,
                   help="--make-model: median over images of max - min logit")
    args = p.parse_args()

    torch.set_num_threads(2)
    if args.make_model is not None:
        return make_model(args)
    if args.weights is None or args.output is None:
        p.error("the following arguments are required: --weights, -o/--output "
                "(or --make-model OUT.pth)")

    model = getattr(torchvision.models, args.model)(num_classes=args.num_classes)
    model.load_state_dict(st.load(args.weights), strict=True)
    model.eval()

    transform = eval_transform(args)
    items = read_list(args.images)
    probs = []
    with torch.no_grad():
        for start in range(0, len(items), args.batch):
            batch = []
            for _, found in items[start:start + args.batch]:
                with Image.open(found) as im:
                    batch.append(transform(im.convert("RGB")))
            logits = model(torch.stack(batch))
            if isinstance(logits, tuple):  # e.g. GoogLeNet / Inception outputs in train mode
                logits = logits[0]
            probs.append(torch.softmax(logits.double(), dim=1))
    write_predictions(args.output, [name for name, _ in items], torch.cat(probs, dim=0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
