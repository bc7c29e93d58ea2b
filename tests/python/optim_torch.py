"""PyTorch reference for tests/test_optim.cpp: applies torch.optim.SGD / AdamW to the parameters
and gradient sequence the C++ test wrote, and evaluates torch's lr schedulers per epoch.
Not a test by itself: the C++ test compares and decides.

Usage: optim_torch.py DIR
  DIR/init.safetensors   initial parameters (F32); metadata "nodecay": comma-separated names
                         that get weight decay 0 when a case excludes them
  DIR/grads.safetensors  gradient for step k of parameter X under "k.X"; metadata "steps"
  DIR/optim_cases.txt    one case a line, lrs = the lr of each step, comma-separated:
      NAME sgd LRS momentum dampening weight_decay nesterov exclude
      NAME adamw LRS beta1 beta2 eps weight_decay amsgrad exclude
      NAME lars LRS momentum weight_decay eta eps nesterov   (nodecay: LARS's skip list)
  DIR/sched_cases.txt    NAME EPOCHS BASE_LR WARMUP START_FACTOR KIND ARGS (WARMUP 0: none)
      KIND step STEP_SIZE GAMMA | multistep M1,M2,... GAMMA | cosine T_MAX ETA_MIN
          | poly TOTAL_ITERS POWER
Writes DIR/NAME.safetensors (final parameters under their names, optimizer state under
"STATE.X", e.g. "momentum_buffer.X") per optimizer case and DIR/NAME.lrs.txt (one lr a line,
epoch 0 first, Python repr so the values are exact) per schedule case.
"""
import json
import os
import struct
import sys
import warnings

import numpy as np
import torch

STATE_KEYS = ("momentum_buffer", "exp_avg", "exp_avg_sq", "max_exp_avg_sq")


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    base = 8 + n
    tensors = {}
    for name, info in header.items():
        if info["dtype"] != "F32":
            sys.exit(f"optim_torch.py: {path}: {name} is {info['dtype']}, expected F32")
        b, e = info["data_offsets"]
        arr = np.frombuffer(data[base + b:base + e], dtype="<f4").reshape(info["shape"])
        tensors[name] = torch.from_numpy(arr.copy())
    return tensors, meta


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        raw = t.detach().contiguous().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def run_lars(root, name, lrs, fields, init, nodecay, grads, steps):
    """LARS as MLPerf's ResNet-50 reference applies it (its TF LARSOptimizer), written with
    torch ops: per tensor, trust = eta * |w| / (|g| + wd * |w| + eps) (1 where a norm is 0),
    step = lr * trust * (g + wd * w); buf = momentum * buf + step; w -= buf (Nesterov: w -=
    step + momentum * buf). The skip list (BatchNorm parameters, biases): trust 1, no decay.
    Norms in float64 (MLPerf's are float32: a last-bit difference in the scale, not a formula's);
    the elementwise steps one float32 op each, unfused."""
    momentum, wd, eta, eps = (float(v) for v in fields[:4])
    nesterov = fields[4] == "1"
    params = {k: v.clone() for k, v in init.items()}
    bufs = {k: torch.zeros_like(v) for k, v in init.items()}
    for k in range(steps):
        for pname, w in params.items():
            g = grads[f"{k}.{pname}"]
            trust, decay = 1.0, 0.0
            if pname not in nodecay:
                wn, gn = w.double().norm().item(), g.double().norm().item()
                if wn > 0 and gn > 0:
                    trust = eta * wn / (gn + wd * wn + eps)
                decay = wd
            step = (g + w * decay) * (lrs[k] * trust)
            bufs[pname] = bufs[pname] * momentum + step
            params[pname] = w - (step + bufs[pname] * momentum if nesterov else bufs[pname])
    out = dict(params)
    out.update({f"momentum_buffer.{k}": b for k, b in bufs.items()})
    write_safetensors(os.path.join(root, name + ".safetensors"), out)


def run_optimizer(root, fields, init, nodecay, grads, steps):
    name, kind, lrs = fields[0], fields[1], [float(v) for v in fields[2].split(",")]
    if len(lrs) != steps:
        sys.exit(f"optim_torch.py: case {name} has {len(lrs)} lrs for {steps} steps")
    if kind == "lars":
        return run_lars(root, name, lrs, fields[3:], init, nodecay, grads, steps)
    params = {k: v.clone().requires_grad_() for k, v in init.items()}
    if kind == "sgd":
        momentum, dampening, wd = (float(v) for v in fields[3:6])
        nesterov, exclude = fields[6] == "1", fields[7] == "1"
        make = lambda groups: torch.optim.SGD(groups, lr=lrs[0], momentum=momentum,
                                              dampening=dampening, weight_decay=wd,
                                              nesterov=nesterov)
    elif kind == "adamw":
        beta1, beta2, eps, wd = (float(v) for v in fields[3:7])
        amsgrad, exclude = fields[7] == "1", fields[8] == "1"
        make = lambda groups: torch.optim.AdamW(groups, lr=lrs[0], betas=(beta1, beta2), eps=eps,
                                                weight_decay=wd, amsgrad=amsgrad)
    else:
        sys.exit(f"optim_torch.py: unknown optimizer {kind!r} in case {name}")
    if exclude:  # the recipe: BatchNorm parameters and biases in a group without weight decay
        decay = [p for k, p in params.items() if k not in nodecay]
        no_decay = [p for k, p in params.items() if k in nodecay]
        opt = make([{"params": decay}, {"params": no_decay, "weight_decay": 0.0}])
    else:
        opt = make(list(params.values()))
    for k in range(steps):
        for group in opt.param_groups:
            group["lr"] = lrs[k]
        for pname, p in params.items():
            p.grad = grads[f"{k}.{pname}"].clone()
        opt.step()
    out = {k: p.detach() for k, p in params.items()}
    for pname, p in params.items():
        for key in STATE_KEYS:
            if opt.state[p].get(key) is not None:  # SGD keeps None without momentum
                out[f"{key}.{pname}"] = opt.state[p][key]
    write_safetensors(os.path.join(root, name + ".safetensors"), out)


def run_schedule(root, fields):
    name, epochs, base_lr = fields[0], int(fields[1]), float(fields[2])
    warmup, start = int(fields[3]), float(fields[4])
    kind, args = fields[5], fields[6:]
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=base_lr)
    if kind == "step":
        main = torch.optim.lr_scheduler.StepLR(opt, step_size=int(args[0]), gamma=float(args[1]))
    elif kind == "multistep":
        main = torch.optim.lr_scheduler.MultiStepLR(
            opt, milestones=[int(m) for m in args[0].split(",")], gamma=float(args[1]))
    elif kind == "cosine":
        main = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=int(args[0]),
                                                          eta_min=float(args[1]))
    elif kind == "poly":
        main = torch.optim.lr_scheduler.PolynomialLR(opt, total_iters=int(args[0]), power=float(args[1]))
    else:
        sys.exit(f"optim_torch.py: unknown schedule {kind!r} in case {name}")
    sched = main
    if warmup > 0:
        linear = torch.optim.lr_scheduler.LinearLR(opt, start_factor=start, total_iters=warmup)
        sched = torch.optim.lr_scheduler.SequentialLR(opt, [linear, main], milestones=[warmup])
    lrs = []
    for _ in range(epochs):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    with open(os.path.join(root, name + ".lrs.txt"), "w") as f:
        f.write("".join(repr(v) + "\n" for v in lrs))


def read_cases(path):
    with open(path) as f:
        return [line.split() for line in f if line.strip()]


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: optim_torch.py DIR")
    torch.set_num_threads(1)  # the test machine is shared
    warnings.filterwarnings("ignore", category=UserWarning)  # SequentialLR's step(0) notice
    root = sys.argv[1]
    init, meta = read_safetensors(os.path.join(root, "init.safetensors"))
    nodecay = set(filter(None, meta.get("nodecay", "").split(",")))
    unknown = nodecay - set(init)
    if unknown:
        sys.exit(f"optim_torch.py: nodecay names no parameter: {sorted(unknown)}")
    grads, gmeta = read_safetensors(os.path.join(root, "grads.safetensors"))
    steps = int(gmeta["steps"])
    cases = read_cases(os.path.join(root, "optim_cases.txt"))
    schedules = read_cases(os.path.join(root, "sched_cases.txt"))
    if not cases or not schedules:
        sys.exit("optim_torch.py: no optimizer or schedule cases")
    for fields in cases:
        run_optimizer(root, fields, init, nodecay, grads, steps)
    for fields in schedules:
        run_schedule(root, fields)


if __name__ == "__main__":
    main()
