"""PyTorch's own kernel-time split (torch.profiler) of one training or inference step, to set
beside our engine's per-layer GPU profile: where PyTorch eager spends its GPU time.

The step is bench/torch_train_bench.py's (same model construction, synthetic batch, SGD with
momentum 0.9 and weight decay 5e-4, zero_grad(set_to_none=True), GradScaler for fp16, TF32 for
every precision but fp32, cudnn.benchmark), channels-last by default. `warmup` steps run
unprofiled (cuDNN autotuning), then `steps` steps under torch.profiler, each ended by
torch.cuda.synchronize(). Every CUDA kernel (and memcpy/memset) goes to a category by RULES
below, from the op that launched it (with that op's parents: autograd nodes, Optimizer.step,
...) and from its name; on --device cpu the "kernels" are the CPU ops with their self CPU time.
Prints markdown, per step: a header (versions, GPU, wall ms, summed kernel ms, so one sees GPU
idle time), the category split and the top kernels; --json PATH writes the same data.

bench/gpu_checks.sh runs it as
  env -u LD_LIBRARY_PATH python3 bench/torch_gpu_profile.py \
      --model resnet50 --precision bf16 --mode train
and a CPU check (torch 1.13 or 2.x) is
  python3 bench/torch_gpu_profile.py --device cpu --model resnet18 --batch 4 --size 64 \
      --steps 2 --warmup 1"""
import argparse
import collections
import contextlib
import json
import re
import sys
import time
import warnings

# (category, op regex, kernel regex): the first rule whose regexes both match wins (None matches
# anything). The op regex is searched in the launching op's chain "outer > ... > inner" (the
# autograd engine's "evaluate_function: X" scopes read "autograd::engine"; on the CPU the chain
# ends with the op itself), the kernel regex in the kernel's name (on the CPU: the op's name).
# Kernels that no op claims have the chain "", so only the kernel-name rules can take them.
CONV_BWD = r"ConvolutionBackward|convolution_backward"
RULES = [
    ("memset/memcpy", None, r"^(Memcpy|Memset|memcpy|memset)"),
    ("optimizer", r"Optimizer\.(step|zero_grad)|step::optimizer|_foreach_|_fused_sgd|_amp_", None),
    ("layout/dtype conversion", None, r"nchwToNhwc|nhwcToNchw|transpose_readWrite|TransposeK"),
    ("layout/dtype conversion", r"(^|> )aten::(to|_to_copy|copy_|contiguous|clone)( |$)", None),
    ("loss", r"step::loss|cross_entropy|log_softmax|nll_loss|LogSoftmaxBack|NllLossBack", None),
    ("conv data-grad", CONV_BWD, r"dgrad|[Bb]ackward_?[Dd]ata|bwd_data"),
    ("conv weight-grad", CONV_BWD, r"wgrad|[Bb]ackward_?([Ff]ilter|[Ww]eight)|bwd_filter"),
    ("conv backward (unsplit)", CONV_BWD, None),
    ("conv forward", r"conv2d|convolution", None),
    ("batchnorm backward", r"BatchNorm\w*Backward|batch_norm\w*backward", None),
    ("batchnorm forward", r"batch_norm", None),
    ("batchnorm forward", r"aten::add_$", r"add<long>"),  # BatchNorm's num_batches_tracked += 1
    ("pooling", r"(?i)pool|MeanBackward|aten::mean", None),
    ("gemm/linear", r"aten::(linear|addmm|mm|matmul|bmm)( |$)|AddmmBackward|MmBackward", None),
    # the autograd engine's own aten::add: summing the gradients of a tensor used twice
    ("elementwise backward",
     r"threshold_backward|ReluBackward|AddBackward|autograd::engine > aten::add", None),
    ("elementwise add/relu", r"aten::(relu|add|threshold|clamp_min)_?( |$)", None),
    ("conv data-grad", None, r"dgrad"),
    ("conv weight-grad", None, r"wgrad"),
    ("conv forward", None, r"fprop|conv|implicit_gemm|winograd"),
    ("batchnorm backward", None, r"bn_bw|batch_norm_backward"),
    ("batchnorm forward", None, r"bn_fw|batch_norm"),
    ("optimizer", None, r"multi_tensor_apply|fused_sgd"),
    ("gemm/linear", None, r"gemm|cublas|cutlass"),
    ("other", None, None),
]
RULES = [(c, o and re.compile(o), k and re.compile(k)) for c, o, k in RULES]
CATEGORIES = list(dict.fromkeys(c for c, _, _ in RULES))
RUNTIME_API = re.compile(r"^(cuda[A-Z]|cu[A-Z]|nccl)")  # CUDA runtime/driver calls, not ops
# record_function ranges (ours, the optimizer's, the profiler's steps): torch 2.x also puts them
# on the GPU timeline as "gpu_user_annotation" spans over the kernels inside; not kernels.
ANNOTATION = re.compile(r"^(step::|Optimizer\.|ProfilerStep#)")


def is_annotation(evt):
    return getattr(evt, "is_user_annotation", False) or bool(ANNOTATION.match(evt.name))


def classify(chain, kernel):
    for cat, op_re, k_re in RULES:
        if (op_re is None or op_re.search(chain)) and (k_re is None or k_re.search(kernel)):
            return cat
    return "other"


def kind(evt):  # "CPU" or "CUDA" (evt.device_type is a DeviceType enum in torch 1.13 and 2.x)
    return str(getattr(evt, "device_type", "CPU")).split(".")[-1]


def chain_of(evt):
    names = []
    while evt is not None:
        n = evt.name
        if n.startswith("autograd::engine::evaluate_function"):
            n = "autograd::engine"
        if not n.startswith("ProfilerStep#"):
            names.append(n)
        evt = getattr(evt, "cpu_parent", None)
    return " > ".join(reversed(names))


def attribute(events, cuda):
    """{(kernel, launching op, category): [calls, us]}, and the us no op claimed (cuda) and
    the us claimed twice (should be 0). On the CPU: {(op, parent op, category): ...}."""
    agg = collections.defaultdict(lambda: [0, 0.0])
    cpu_ops = [e for e in events if kind(e) == "CPU" and not getattr(e, "is_async", False)]
    if not cuda:  # every op's self time (a leaf-only sum would miss mkldnn_convolution's compute)
        for e in cpu_ops:
            if e.self_cpu_time_total > 0:
                parent = getattr(e, "cpu_parent", None)
                row = agg[(e.name, parent.name if parent else "-", classify(chain_of(e), e.name))]
                row[0] += 1
                row[1] += e.self_cpu_time_total
        return agg, 0.0, 0.0
    device_us, device_n = collections.Counter(), collections.Counter()  # the ground truth
    for e in events:
        if kind(e) == "CUDA" and not is_annotation(e):
            device_us[e.name] += e.time_range.elapsed_us()
            device_n[e.name] += 1
    claimed_us, claimed_n = collections.Counter(), collections.Counter()
    for e in cpu_ops:
        if not getattr(e, "kernels", None) or RUNTIME_API.match(e.name):
            continue
        chain = chain_of(e)
        for k in e.kernels:
            row = agg[(k.name, e.name, classify(chain, k.name))]
            row[0] += 1
            row[1] += k.duration
            claimed_us[k.name] += k.duration
            claimed_n[k.name] += 1
    unclaimed = 0.0
    for name, us in device_us.items():  # kernels that no op claimed: by their name alone
        if us > claimed_us[name] + 1e-6:
            row = agg[(name, "(none)", classify("", name))]
            row[0] += max(0, device_n[name] - claimed_n[name])
            row[1] += us - claimed_us[name]
            unclaimed += us - claimed_us[name]
    twice = sum(max(0.0, us - device_us[n]) for n, us in claimed_us.items())
    return agg, unclaimed, twice


def median(v):
    v = sorted(v)
    return v[len(v) // 2] if v else float("nan")


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2
        sys.stderr.write("torch_gpu_profile.py: error: %s\n" % message)
        sys.exit(2)


def at_least(low):
    def parse(s):
        v = int(s)
        if v < low:
            raise ValueError(s)
        return v
    parse.__name__ = "integer >= %d" % low
    return parse


def main():
    p = Parser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="resnet50")
    p.add_argument("--mode", default="train", choices=["train", "infer"])
    p.add_argument("--batch", type=at_least(1), default=256)
    p.add_argument("--size", type=at_least(1), default=224)
    p.add_argument("--precision", default="bf16", choices=["tf32", "bf16", "fp16", "fp32"])
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--channels-last", default=True, action=argparse.BooleanOptionalAction)
    p.add_argument("--warmup", type=at_least(0), default=5)
    p.add_argument("--steps", type=at_least(1), default=5)
    p.add_argument("--top", type=at_least(1), default=25)
    p.add_argument("--json", metavar="PATH")
    a = p.parse_args()

    import torch
    import torch.nn.functional as F
    import torchvision
    from torch.profiler import ProfilerActivity, profile, record_function

    if a.model.startswith("_") or not callable(torchvision.models.__dict__.get(a.model)):
        p.error("unknown torchvision model: %s" % a.model)
    cuda = a.device == "cuda"
    if cuda and not torch.cuda.is_available():
        print("torch_gpu_profile.py: CUDA requested but not available (torch %s, built for CUDA "
              "%s)" % (torch.__version__, torch.version.cuda), file=sys.stderr)
        sys.exit(1)

    # ---- the step, as bench/torch_train_bench.py's ------------------------------------------
    if cuda:  # tf32 for tf32 and for the mixed modes (as our engine runs their other math)
        torch.backends.cuda.matmul.allow_tf32 = a.precision != "fp32"
        torch.backends.cudnn.allow_tf32 = a.precision != "fp32"
        torch.backends.cudnn.benchmark = True
    amp = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(a.precision)
    autocast = (lambda: torch.autocast(a.device, dtype=amp)) if amp else contextlib.nullcontext
    try:  # e.g. torch 1.13 has no fp16 autocast on the CPU
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with autocast():
                pass
    except Exception as e:
        p.error("--precision %s on %s: %s" % (a.precision, a.device, str(e).splitlines()[0]))
    fmt = torch.channels_last if a.channels_last else torch.contiguous_format
    model = torchvision.models.__dict__[a.model](num_classes=1000).to(a.device, memory_format=fmt)
    model.train(a.mode == "train")
    x = torch.randn(a.batch, 3, a.size, a.size, device=a.device).to(memory_format=fmt)
    t = torch.randint(0, 1000, (a.batch,), device=a.device)
    use_scaler = cuda and a.precision == "fp16"
    if hasattr(torch.amp, "GradScaler"):  # torch >= 2.3; torch.cuda.amp's is deprecated there
        scaler = torch.amp.GradScaler("cuda", enabled=use_scaler)
    else:
        scaler = torch.cuda.amp.GradScaler(enabled=use_scaler)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)

    def loss_of(out):
        if isinstance(out, torchvision.models.InceptionOutputs):
            return F.cross_entropy(out.logits, t) + 0.4 * F.cross_entropy(out.aux_logits, t)
        if isinstance(out, torchvision.models.GoogLeNetOutputs):
            return F.cross_entropy(out.logits, t) + 0.3 * (
                F.cross_entropy(out.aux_logits1, t) + F.cross_entropy(out.aux_logits2, t))
        return F.cross_entropy(out, t)

    def step():  # ms, wall
        start = time.perf_counter()
        if a.mode == "train":
            opt.zero_grad(set_to_none=True)
            with autocast():
                out = model(x)
                with record_function("step::loss"):
                    loss = loss_of(out)
            scaler.scale(loss).backward()
            with record_function("step::optimizer"):
                scaler.step(opt)
                scaler.update()
        else:
            with torch.inference_mode(), autocast():
                model(x)
        if cuda:
            torch.cuda.synchronize()
        return (time.perf_counter() - start) * 1e3

    warm = [step() for _ in range(a.warmup)]
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        walls = [step() for _ in range(a.steps)]
    agg, unclaimed, twice = attribute(prof.events(), cuda)

    # ---- report, per step ---------------------------------------------------------------------
    S = float(a.steps)
    total = sum(us for _, us in agg.values())
    pct = lambda us: 100.0 * us / total if total else 0.0  # noqa: E731
    per_cat = collections.Counter()
    for (_, _, cat), (_, us) in agg.items():
        per_cat[cat] += us
    gpu = torch.cuda.get_device_name() if cuda else None
    cudnn = torch.backends.cudnn.version() if cuda else None
    where = ("%s, cuda %s, cudnn %s" % (gpu, torch.version.cuda, cudnn) if cuda
             else "cpu, %d threads" % torch.get_num_threads())
    what = "%s %s %s batch %d size %d %s" % (a.model, a.mode, a.precision, a.batch, a.size,
                                            "channels-last" if a.channels_last else "nchw")
    unit = "GPU kernel" if cuda else "CPU op self"
    wall = median(walls)
    print("## torch.profiler: %s\n" % what)
    print("torch %s | %s | %s | wall %.2f ms/step (median of %d profiled steps; unprofiled "
          "warm-up median %.2f) | %s time %.2f ms/step = %.0f%% of wall%s\n"
          % (torch.__version__, where, what, wall, a.steps, median(warm[a.warmup // 2:]), unit,
             total / 1e3 / S, 100.0 * total / 1e3 / S / wall,
             " (%.2f ms/step launched by no op)" % (unclaimed / 1e3 / S) if cuda else ""))
    if twice > 0.001 * total:
        print("note: kernels claimed by ops exceed the device's by %.2f ms/step\n"
              % (twice / 1e3 / S))
    print("| category | ms/step | %% of %s time |\n|---|---:|---:|" % unit)
    for cat in CATEGORIES:
        print("| %s | %.3f | %.1f |" % (cat, per_cat[cat] / 1e3 / S, pct(per_cat[cat])))
    print("| **total** | **%.3f** | 100.0 |\n" % (total / 1e3 / S))
    rows = sorted(agg.items(), key=lambda kv: -kv[1][1])
    print("| # | %s | %s | calls/step | ms/step | %% | category |"
          % (("kernel", "launched by") if cuda else ("CPU op", "called by")))
    print("|---:|---|---|---:|---:|---:|---|")
    for i, ((name, op, cat), (n, us)) in enumerate(rows[:a.top]):
        print("| %d | `%s` | %s | %g | %.3f | %.1f | %s |" % (
            i + 1, name[:90].replace("|", "/"), op[:40], n / S, us / 1e3 / S, pct(us), cat))
    sys.stdout.flush()
    if a.json:
        doc = {"torch": torch.__version__, "cuda": torch.version.cuda, "cudnn": cudnn,
               "device": gpu or "cpu", "model": a.model, "mode": a.mode,
               "precision": a.precision, "batch": a.batch, "size": a.size,
               "channels_last": a.channels_last, "steps": a.steps, "unit": unit,
               "wall_ms_per_step": wall, "wall_ms_profiled": walls, "wall_ms_warmup": warm,
               "total_ms_per_step": total / 1e3 / S,
               "unclaimed_ms_per_step": unclaimed / 1e3 / S,
               "categories": {c: per_cat[c] / 1e3 / S for c in CATEGORIES},
               "kernels": [{"name": name, "op": op, "category": cat, "calls_per_step": n / S,
                            "ms_per_step": us / 1e3 / S} for (name, op, cat), (n, us) in rows]}
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=1)


if __name__ == "__main__":
    main()
