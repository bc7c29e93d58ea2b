#!/usr/bin/env python3
"""Export a torchvision classification model's state dict as a safetensors file for mpicnn.

What it is: a converter. It builds torchvision.models.NAME(num_classes=N), fills it either
from a torch.save'd .pth state dict (or a checkpoint dict holding one under "state_dict" or
"model", e.g. torchvision's model zoo files or its reference training scripts' checkpoints) or
from a random initialisation after torch.manual_seed(S), and writes every state_dict entry
(parameters and buffers, BatchNorm's num_batches_tracked included as I64) in state_dict order,
with metadata {"format": "pt", "model": NAME, "source": "torchvision <version>"}. The result
is what `./pipeline_eval --weights OUT.safetensors --model NAME` loads.

What it is not: it downloads nothing (fetch the .pth elsewhere), converts no other framework's
weights, renames no keys (the file must be for the same torchvision architecture; a leading
"module." from DataParallel is the one thing it strips), and does not check that mpicnn
implements NAME: mpicnn's loader decides that. It needs torch and torchvision, not the
`safetensors` package (the file is written with struct + json).

Usage:
  export_torchvision.py --model NAME -o OUT.safetensors
                        [--weights FILE.pth | --random-seed S] [--num-classes N]
                        [--allow-pickle]

.pth files are read with torch.load(weights_only=True), which refuses arbitrary pickled
objects; --allow-pickle lifts that for a checkpoint you trust that also holds non-tensor
objects (an argparse Namespace, say). Errors: one line on stderr starting "export_torchvision: "
and exit status 1.
"""
import argparse
import json
import os
import struct
import sys
import tempfile

import torch
import torchvision
import torchvision.models as tvm

PROG = "export_torchvision"
_DTYPE_NAMES = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16",
                torch.bfloat16: "BF16", torch.int64: "I64", torch.int32: "I32",
                torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8", torch.bool: "BOOL"}


class ExportError(Exception):
    pass


def classification_models():
    """Builder names of torchvision's classification models (not detection, video, ...)."""
    if hasattr(tvm, "list_models"):
        return sorted(tvm.list_models(module=tvm))
    return sorted(n for n, f in vars(tvm).items()
                  if callable(f) and n[:1].islower() and not n.startswith("_")
                  and n not in ("get_model", "get_weight", "get_model_weights", "list_models"))


def build_model(name, num_classes):
    known = classification_models()
    if name not in known:
        few = ", ".join(n for n in ("resnet18", "resnet50", "vgg11", "alexnet", "squeezenet1_0",
                                    "densenet121", "mobilenet_v2") if n in known)
        raise ExportError(f"unknown model '{name}' (not a torchvision.models classification "
                          f"builder; known ones include {few}; {len(known)} in all)")
    if num_classes < 1:
        raise ExportError(f"--num-classes must be at least 1, got {num_classes}")
    try:
        return getattr(tvm, name)(num_classes=num_classes)
    except Exception as e:  # noqa: BLE001 - any builder failure is a user-facing error
        raise ExportError(f"cannot build {name}(num_classes={num_classes}): "
                          f"{type(e).__name__}: {e}") from None


def read_state_dict(path, allow_pickle):
    if not os.path.isfile(path):
        raise ExportError(f"cannot read weights '{path}': no such file")
    try:
        obj = torch.load(path, map_location="cpu", weights_only=not allow_pickle)
    except TypeError:  # a torch without weights_only
        try:
            obj = torch.load(path, map_location="cpu")
        except Exception as e:  # noqa: BLE001
            raise ExportError(f"cannot read weights '{path}': {type(e).__name__}: "
                              f"{str(e).splitlines()[0] if str(e) else ''}") from None
    except Exception as e:  # noqa: BLE001
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        if "WeightsUnpickler error: " in first:  # drop torch's long preamble
            first = first.split("WeightsUnpickler error: ", 1)[1]
        hint = ("" if allow_pickle else
                " (read with weights_only=True; use --allow-pickle for a trusted checkpoint "
                "holding non-tensor objects)")
        raise ExportError(f"cannot read weights '{path}': {type(e).__name__}: {first}{hint}") \
            from None
    if isinstance(obj, dict):
        for key in ("state_dict", "model"):
            if key in obj and isinstance(obj[key], dict):
                obj = obj[key]
                break
    if not isinstance(obj, dict) or not obj:
        raise ExportError(f"'{path}' holds no state dict (expected a dict of tensors, or a "
                          f"checkpoint dict with a 'state_dict' or 'model' entry)")
    bad = next((k for k, v in obj.items() if not isinstance(v, torch.Tensor)), None)
    if bad is not None:
        raise ExportError(f"'{path}': state dict entry '{bad}' is a "
                          f"{type(obj[bad]).__name__}, not a tensor")
    keys = list(obj)
    if all(isinstance(k, str) and k.startswith("module.") for k in keys):
        obj = {k[len("module."):]: v for k, v in obj.items()}
    return obj


def load_weights(model, name, num_classes, path, state):
    expected = model.state_dict()
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"missing key '{missing[0]}'" +
                         (f" (+{len(missing) - 1} more)" if len(missing) > 1 else ""))
        if unexpected:
            parts.append(f"unexpected key '{unexpected[0]}'" +
                         (f" (+{len(unexpected) - 1} more)" if len(unexpected) > 1 else ""))
        raise ExportError(f"'{path}' does not match {name}: " + ", ".join(parts))
    for k, t in expected.items():
        if tuple(state[k].shape) != tuple(t.shape):
            raise ExportError(f"'{path}' does not match {name}(num_classes={num_classes}): "
                              f"'{k}' has shape {list(state[k].shape)} in the file, "
                              f"{list(t.shape)} in the model")
    try:
        model.load_state_dict(state, strict=True)
    except Exception as e:  # noqa: BLE001
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise ExportError(f"cannot load '{path}' into {name}: {type(e).__name__}: {first}") \
            from None


def write_safetensors(path, tensors, metadata):
    """tensors: name -> tensor, written in order; atomically (temp file, fsync, os.replace)."""
    header = {"__metadata__": {str(k): str(v) for k, v in metadata.items()}}
    blobs, offset = [], 0
    for name, t in tensors.items():
        t = t.detach().cpu().contiguous()
        if t.dtype not in _DTYPE_NAMES:
            raise ExportError(f"entry '{name}' has dtype {t.dtype}, which safetensors "
                              f"cannot hold here")
        if t.dtype == torch.bool:
            t = t.to(torch.uint8)  # BOOL is one byte per value, 0 or 1
        nbytes = t.numel() * t.element_size()
        header[name] = {"dtype": _DTYPE_NAMES[tensors[name].dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + nbytes]}
        blobs.append(t)
        offset += nbytes
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ExportError(f"cannot write '{path}': folder '{folder}' does not exist")
    try:
        fd, tmp = tempfile.mkstemp(prefix=".tmp-" + os.path.basename(path) + ".", dir=folder)
    except OSError as e:
        raise ExportError(f"cannot write '{path}': {e.strerror or e}") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(struct.pack("<Q", len(text)))
            fh.write(text)
            for t in blobs:
                if t.numel():
                    # Little-endian bytes (the host order on every platform torch supports here).
                    fh.write(memoryview(t.reshape(-1).view(torch.uint8).numpy()))
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644 & ~_umask())
        os.replace(tmp, path)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError):
            raise ExportError(f"cannot write '{path}': {e.strerror or e}") from None
        raise
    try:  # make the rename durable too; not fatal where directories cannot be opened
        dfd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass
    return offset + 8 + len(text)


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="export_torchvision.py",
        description="Export a torchvision classification model's state dict to a safetensors "
                    "file that mpicnn loads (./pipeline_eval --weights FILE --model NAME).")
    p.add_argument("--model", required=True,
                   help="torchvision.models builder name: resnet18, resnet50, vgg11, alexnet, "
                        "squeezenet1_0, densenet121, ...")
    p.add_argument("-o", "--output", required=True, metavar="OUT.safetensors",
                   help="file to write (replaced atomically)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--weights", metavar="FILE.pth",
                     help="torch.save'd state dict, or checkpoint dict with a 'state_dict' or "
                          "'model' entry, for that architecture")
    src.add_argument("--random-seed", type=int, default=None, metavar="S",
                     help="without --weights: random initialisation after torch.manual_seed(S) "
                          "(default 0)")
    p.add_argument("--num-classes", type=int, default=1000, metavar="N",
                   help="classifier outputs (default 1000)")
    p.add_argument("--allow-pickle", action="store_true",
                   help="read --weights with full unpickling (only for a trusted file)")
    args = p.parse_args(argv)

    try:
        if args.weights is None:
            torch.manual_seed(0 if args.random_seed is None else args.random_seed)
        model = build_model(args.model, args.num_classes)
        if args.weights is not None:
            state = read_state_dict(args.weights, args.allow_pickle)
            load_weights(model, args.model, args.num_classes, args.weights, state)
        model.eval()
        tensors = model.state_dict()
        size = write_safetensors(args.output, tensors, {
            "format": "pt", "model": args.model,
            "source": f"torchvision {torchvision.__version__}"})
    except ExportError as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 1
    origin = (f"weights {args.weights}" if args.weights is not None else
              f"random init, seed {0 if args.random_seed is None else args.random_seed}")
    print(f"{args.output}: {args.model}, {args.num_classes} classes, {len(tensors)} entries, "
          f"{size} bytes ({origin})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
