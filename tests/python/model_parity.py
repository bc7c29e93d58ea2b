"""Reference results for tests/test_model_parity.cpp, made at test time, never committed.

usage: model_parity.py OUT_DIR CASES.json          every case
       model_parity.py --serve OUT_DIR CASES.json  one case per tag read from stdin

With --serve, each tag read from stdin (one per line) runs that case, then TAG.done appears
in OUT_DIR (TAG.failed with the error when it fails): the test asks for one case at a time and
deletes its files after checking them, so at most two models' files exist at once (one of the
large ones: the test asks for the next case only after dropping a large one) and they can live
in memory (/dev/shm) instead of being written to disk.

For each case ({"tag", "model", "batch", "size", "classes", "in_channels", "optimizer", "lr",
"momentum", "weight_decay", "nesterov", "exclude_bn_bias", "steps", "seed"}) the PyTorch model
is built with a fixed seed in train mode; its state dict goes to TAG.init.safetensors (float32);
then `steps` steps of forward, cross-entropy, backward and the optimizer run on one fixed batch.

The loss is cross-entropy, plus the weighted cross-entropy of each auxiliary output for models
that return them in train mode (torch_models.total_loss: Inception v3, GoogLeNet), as the
engine's training loss; "logits" are the main ones.

TAG.ref.safetensors holds the input and targets, and the exact results, from PyTorch in float64
(from the float32 weights and input, exact in double), stored as F64: the logits and every
parameter gradient of step 1, the loss of every step (loss.K), and the state dict after the last
step (final.NAME). Both of the test's engines are compared with these: its float64 build to
~1e-9, where rounding cannot flip a ReLU or max-pool decision, and its float32 build within
PyTorch's own float32 spread, which the same file records:

- torch_f32_err.KEY: the largest norm-wise relative distance from the exact result over
  float32 runs of PyTorch that differ only in rounding: one as it comes, one with the batch
  reversed (other summation orders in BatchNorm statistics and GEMMs), on 1 thread instead of
  2 (other GEMM blockings) and with the input and weights moved by one float32 ulp in random
  directions, which crosses the ReLU and max-pool decisions that sit within rounding distance
  of their kink, as another GEMM kernel's rounding does; for the step-1 quantities (logits,
  gradients), whose jumps across such a kink are the least predictable, GRAD_NUDGES - 1 more
  one-step runs with other nudges. Only for models with BatchNorm and for AdamW; 0 (the fixed
  tolerances) elsewhere.
- AdamW: update1.NAME, the first step's update (after - before), and cond.NAME (U8, per
  element): 1 where the step-1 gradient is at least COND_MARGIN times farther from zero than
  those runs are from the exact one; torch_f32_err.update1.NAME is the runs' spread of the
  update on those entries. AdamW's first steps move each weight by about lr * sign(gradient),
  so a gradient within rounding of zero moves its weight by +-lr at random, and every later
  gradient with it: the float32 check compares the first update where cond is 1, and the
  later steps only in float64.
"""
import copy
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402
import torch_models  # noqa: E402

# Float32 runs with the input and weights nudged by one ulp, for the spread of the step-1
# quantities (see float32_spread): measured on vgg16_bn at seed 1011, 8 such runs land
# 0.48-0.69% from the exact first-layer gradient, and one of them 2.1%.
GRAD_NUDGES = 4
# AdamW's first float32 update is compared where the gradient is this many times farther from
# zero than the float32 runs are from the exact one (cond.NAME): there its sign is certain.
COND_MARGIN = 100


def optimizer(model, case):
    """torch.optim's SGD or AdamW with the case's hyperparameters; with exclude_bn_bias, no
    weight decay on 1-D parameters (BatchNorm weights and biases, every bias), as the engine's
    --no-decay-bn-bias."""
    wd = case["weight_decay"]
    if case["exclude_bn_bias"]:
        groups = [{"params": [p for p in model.parameters() if p.dim() > 1]},
                  {"params": [p for p in model.parameters() if p.dim() <= 1], "weight_decay": 0.0}]
    else:
        groups = model.parameters()
    if case["optimizer"] == "sgd":
        return torch.optim.SGD(groups, lr=case["lr"], momentum=case["momentum"], dampening=0.0,
                               weight_decay=wd, nesterov=case["nesterov"])
    return torch.optim.AdamW(groups, lr=case["lr"], betas=(0.9, 0.999), eps=1e-8, weight_decay=wd)


def steps(model, x, t, case, dtype, count=None, own=False):
    """Train `model` (a copy, in `dtype`; `model` itself when own) on (x, t) for the case's
    steps and return the logits and gradients of step 1, the loss of every step, (AdamW) the
    parameters after step 1 (after1.NAME) and the state dict after the last step, all as
    float64 or int64 tensors. With count=1, a one-step run of float32_spread: the step-1
    quantities only (no state dict, which would be the state after one step, not after the
    case's steps)."""
    assert count in (None, 1)
    model = (model if own else copy.deepcopy(model)).to(dtype).train()
    opt = optimizer(model, case)
    out = {}
    for step in range(case["steps"] if count is None else count):
        opt.zero_grad(set_to_none=False)
        logits, loss = torch_models.total_loss(model(x.to(dtype)), t)
        loss.backward()
        out["loss.%d" % step] = loss.detach().double().reshape([])
        if step == 0:
            out["logits"] = logits.detach().double()
        for name, p in model.named_parameters():
            # clone: in float64 .double() would return p.grad itself, which the next
            # zero_grad and backward overwrite.
            if step == 0:
                out["grad." + name] = p.grad.detach().clone().double()
        adamw = case["optimizer"] == "adamw"
        if count == 1 and not adamw:
            break  # nothing after step 1 is recorded
        opt.step()
        if step == 0 and adamw:
            for name, p in model.named_parameters():
                out["after1." + name] = p.detach().clone().double()
    if count is None:
        for name, v in model.state_dict().items():
            out["final." + name] = v.double() if v.is_floating_point() else v
    return out


def relative(err, den):
    """err / den as the float32 scalar tensor the test reads (err itself when den is 0)."""
    return torch.tensor(err / den if den > 0 else err, dtype=torch.float32)


def ulp_nudged(t, gen):
    """t (float32) moved by one ulp up or down, at random per element."""
    up = torch.nextafter(t, torch.full_like(t, float("inf")))
    down = torch.nextafter(t, torch.full_like(t, float("-inf")))
    return torch.where(torch.rand(t.shape, generator=gen) < 0.5, up, down)


def float32_spread(model, x, t, case, exact):
    """PyTorch float32 runs that differ only in rounding, one at a time (a VGG run holds ~2 GB):
    the two whole runs of the module docstring, then GRAD_NUDGES - 1 one-step runs with other
    one-ulp nudges for the step-1 quantities (logits, loss.0, gradients, AdamW's after1), whose
    jumps across a near-kink are the least predictable. Returns, per float key of `exact`, the
    largest norm-wise distance from it; per gradient (AdamW), the largest distance of each
    element; and (AdamW) every run's after1 parameters."""
    gen = torch.Generator().manual_seed(case["seed"] + 2)

    def nudged():
        m = copy.deepcopy(model)
        with torch.no_grad():
            for v in m.state_dict().values():
                if v.is_floating_point():
                    v.copy_(ulp_nudged(v, gen))
        return m, ulp_nudged(x, gen)

    def variants():  # (threads, model, input, targets, batch reversed, steps, model is a copy)
        yield 2, model, x, t, False, None, False
        m, xn = nudged()
        yield 1, m, xn.flip(0), t.flip(0), True, None, True
        for _ in range(GRAD_NUDGES - 1):
            yield (2, *nudged(), t, False, 1, True)

    norm_err, elem_err, after1 = {}, {}, []
    for threads, m, xv, tv, flipped, count, own in variants():
        torch.set_num_threads(threads)
        r = steps(m, xv, tv, case, torch.float32, count, own)
        del m
        if flipped:
            r["logits"] = r["logits"].flip(0)
        adamw = case["optimizer"] == "adamw"
        if adamw:
            after1.append({k: r.pop(k) for k in list(r) if k.startswith("after1.")})
        for key, v in exact.items():
            if not v.is_floating_point() or key not in r:
                continue
            d = r.pop(key) - v
            norm_err[key] = max(norm_err.get(key, 0.0), d.norm().item())
            if adamw and key.startswith("grad."):
                elem_err[key] = d.abs() if key not in elem_err else torch.maximum(elem_err[key], d.abs())
        del r
    torch.set_num_threads(2)
    return norm_err, elem_err, after1


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
    # The float32 runs only where float32's spread can decide a tolerance: models with
    # BatchNorm, and AdamW. Elsewhere PyTorch's float32 error stays far below the fixed
    # tolerances, so it is recorded as 0 and those apply (never looser than with the runs).
    has_bn = any(isinstance(m, torch.nn.BatchNorm2d) for m in model.modules())
    norm_err, elem_err, after1 = ({}, {}, []) if not has_bn and case["optimizer"] != "adamw" \
        else float32_spread(model, x, t, case, exact)
    ref = {"input": x, "target": t}
    for key, v in exact.items():
        if key.startswith("after1."):
            continue
        ref[key] = v
        if v.is_floating_point():
            ref["torch_f32_err." + key] = relative(norm_err.get(key, 0.0), v.norm().item())
    if case["optimizer"] == "adamw":
        init = model.state_dict()
        for name, _ in model.named_parameters():
            cond = exact["grad." + name].abs() >= COND_MARGIN * elem_err["grad." + name]
            ref["cond." + name] = cond.to(torch.uint8)
            # The first update on those entries, and the runs' spread of it.
            want = exact["after1." + name] - init[name].double()
            ref["update1." + name] = want
            want = want[cond]
            err = max((a["after1." + name] - init[name].double())[cond].sub(want).norm().item()
                      for a in after1)
            ref["torch_f32_err.update1." + name] = relative(err, want.norm().item())
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
