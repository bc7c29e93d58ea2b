"""Reference results for tests/test_model_parity.cpp, made at test time, never committed.

usage: model_parity.py OUT_DIR CASES.json          every case
       model_parity.py --serve OUT_DIR CASES.json  one case per tag read from stdin

With --serve, each tag read from stdin (one per line) runs that case, then TAG.done appears
in OUT_DIR (TAG.failed with the error when it fails): the test asks for one case at a time and
deletes its files after checking them, so at most one model's files exist at once (VGG's are
about 1.5 GB) and they can live in memory (/dev/shm) instead of being written to disk.

For each case ({"tag", "model", "batch", "size", "classes", "in_channels", "optimizer",
"steps", "seed"}) the PyTorch model is built with a fixed seed in train mode; its state dict
goes to TAG.init.safetensors; then `steps` steps of forward, cross-entropy, backward and the
optimizer run on one fixed batch. TAG.ref.safetensors holds the input, targets, the logits,
loss and every parameter gradient of step 1, and the whole state dict after the last step.

The reference runs in float64 from the float32 weights and input (exact in double), stored
as float32: PyTorch's float32 CPU path is the wrong yardstick, since on small batches it can
differ from its own float64 result by 1e-2 (sums that cancel in BatchNorm backward). For models
with BatchNorm the same steps also run twice in float32 (with the batch in order and reversed,
the same mathematics with other summation orders in BatchNorm statistics and GEMMs),
and `torch_f32_err.KEY` records the larger distance from the exact result, an estimate of
float32's own spread on this model: the test holds us to the fixed tolerances, or, where
PyTorch's own float32 misses them (deep BatchNorm nets at these batch sizes), to the same
order as PyTorch's own error (5x).
"""
import copy
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402
import torch_models  # noqa: E402

# Hyperparameters shared with the C++ side (tests/test_model_parity.cpp).
SGD = dict(lr=1e-4, momentum=0.9, dampening=0.0, weight_decay=5e-4, nesterov=False)
ADAMW = dict(lr=1e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2)


def steps(model, x, t, case, dtype):
    """Train `model` (a copy, in `dtype`) on (x, t); returns logits, loss and gradients of step 1
    and the state dict after the last step, all as float64 or int64 tensors."""
    model = copy.deepcopy(model).to(dtype).train()
    if case["optimizer"] == "sgd":
        opt = torch.optim.SGD(model.parameters(), **SGD)
    else:
        opt = torch.optim.AdamW(model.parameters(), **ADAMW)
    out = {}
    for step in range(case["steps"]):
        opt.zero_grad(set_to_none=False)
        logits = model(x.to(dtype))
        loss = F.cross_entropy(logits, t)
        loss.backward()
        if step == 0:
            out["logits"] = logits.detach().double()
            out["loss"] = loss.detach().double().reshape([])
            for name, p in model.named_parameters():
                # clone: in float64 .double() would return p.grad itself, which the next
                # zero_grad and backward overwrite.
                out["grad." + name] = p.grad.detach().clone().double()
        opt.step()
    for name, v in model.state_dict().items():
        out["final." + name] = v.double() if v.is_floating_point() else v
    return out


def run(case, out_dir):
    torch.manual_seed(case["seed"])
    model = torch_models.build(case["model"], case["classes"], case["in_channels"], 0.0)
    # BatchNorm starts at weight 1, bias 0, mean 0, var 1, and several families start biases at
    # 0: perturb them so gradients are not special-cased by those values and no parameter
    # starts at exactly zero (the relative error of an update from zero measures rounding).
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.weight.uniform_(0.8, 1.2)
                m.bias.uniform_(-0.1, 0.1)
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
            elif isinstance(m, (torch.nn.Conv2d, torch.nn.Linear)) and m.bias is not None:
                m.bias.uniform_(-0.01, 0.01)  # VGG and SqueezeNet start them at 0
    tag = case["tag"]
    st.save(os.path.join(out_dir, tag + ".init.safetensors"), model.state_dict())

    gen = torch.Generator().manual_seed(case["seed"] + 1)
    b, c, s = case["batch"], case["in_channels"], case["size"]
    x = torch.rand(b, c, s, s, generator=gen) * 2 - 1  # float32 values, exact in double
    t = torch.randint(0, case["classes"], (b,), generator=gen)

    exact = steps(model, x, t, case, torch.float64)
    # The float32 runs only where float32's spread can decide the tolerance: models with
    # BatchNorm. Elsewhere PyTorch's float32 error stays far below the fixed tolerances, so it
    # is recorded as 0 and the fixed tolerances apply (never looser than with the runs).
    single = flipped = None
    if any(isinstance(m, torch.nn.BatchNorm2d) for m in model.modules()):
        single = steps(model, x, t, case, torch.float32)
        flipped = steps(model, x.flip(0), t.flip(0), case, torch.float32)
        flipped["logits"] = flipped["logits"].flip(0)
    ref = {"input": x, "target": t}
    for key, v in exact.items():
        if not v.is_floating_point():
            ref[key] = v
            continue
        ref[key] = v.float()
        # How far PyTorch's own float32 path lands from the exact result (norm-wise).
        den = v.norm().item()
        err = 0.0 if single is None else max((single[key] - v).norm().item(),
                                             (flipped[key] - v).norm().item())
        ref["torch_f32_err." + key] = torch.tensor(err / den if den > 0 else err,
                                                   dtype=torch.float32)
    st.save(os.path.join(out_dir, tag + ".ref.safetensors"), ref)


def serve(out_dir, cases):
    by_tag = {c["tag"]: c for c in cases}
    for line in sys.stdin:
        tag = line.strip()
        if not tag:
            continue
        try:
            run(by_tag[tag], out_dir)
            marker, text = tag + ".done", ""
        except Exception as e:  # reported to the test, which fails the case with it
            marker, text = tag + ".failed", "%s: %s" % (type(e).__name__, e)
        tmp = os.path.join(out_dir, marker + ".tmp")
        with open(tmp, "w") as fh:
            fh.write(text)
        os.rename(tmp, os.path.join(out_dir, marker))


def main():
    args = sys.argv[1:]
    serving = args[:1] == ["--serve"]
    out_dir, cases_path = args[1:] if serving else args
    torch.set_num_threads(2)
    with open(cases_path) as fh:
        cases = json.load(fh)
    if serving:
        serve(out_dir, cases)
        return
    for case in cases:
        run(case, out_dir)


if __name__ == "__main__":
    main()
