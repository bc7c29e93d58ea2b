"""PIL / torchvision reference for tests/test_image.cpp, computed at test time. Not a test by
itself: it writes what PIL and torchvision produce (and a torchvision model's predictions), and
the C++ test compares and decides.

Usage: preprocess_torch.py MODE DIR
  encode  DIR/encode.txt lines "NAME FORMAT MODE [OPTION...]": DIR/inputs.safetensors[NAME] (U8,
          H x W x C) is saved by PIL as DIR/NAME.FORMAT in PIL mode MODE (L, LA, RGB, RGBA, P,
          CMYK); JPEG options: progressive, 444 (no chroma subsampling), exif6 (an EXIF
          orientation tag "rotate 90", which PIL's open ignores). PIL then reopens the file and
          writes its convert("RGB") and convert("L") pixels to DIR/decoded.safetensors as
          NAME.rgb and NAME.l.
  decode  DIR/decode.txt lines "FILE" (in DIR): PIL's Image.open(f).convert("RGB") of each, as
          torchvision's loader does, to DIR/pil_decoded.safetensors as FILE.rgb, or where PIL
          raises, its message as FILE.error (U8 text).
  resize  DIR/resize.txt lines "ID OP ARGS...": input DIR/inputs.safetensors[ID]; output
          DIR/outputs.safetensors[ID] (U8, H x W x C):
            resize OH OW       Image.resize((OW, OH), BILINEAR)
            shorter S          torchvision Resize(S)
            center CH CW       torchvision CenterCrop((CH, CW))
            crop T L H W       Image.crop((L, T, L + W, T + H))  (zeros outside)
            place ST SL SH SW RH RW T L H W FLIP
                               crop (ST, SL, SH, SW), resize to RH x RW, crop (T, L, H, W), mirror
  eval    DIR/list.txt image files; DIR/ours_png.safetensors and ours_jpg.safetensors hold our
          (N, 3, 224, 224) tensors, DIR/ours_gray.safetensors our 1-channel PNG tensors. Runs
          Resize(256) + CenterCrop(224) + ToTensor + Normalize(ImageNet) on PIL-opened files and
          a torchvision model (mobilenet_v3_small, torch.manual_seed(0), eval mode, random
          weights: no pretrained weights exist offline) on both tensor sets. Writes
          DIR/eval.safetensors: per image max and mean |ours - torchvision| in 8-bit levels
          (difference * std * 255) per set, and the predicted classes per set. If
          DIR/ours_decoded.safetensors exists (our decoded JPEGs, as stored, keyed by file
          name), also jpg.decoded_max: per JPEG the max |ours - PIL| of the 8-bit pixels of
          Image.open(f) before any resize (-1 where the shapes differ).
"""
import os
import sys

import numpy as np
import torch
import torchvision
import torchvision.transforms as T
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def to_pil(a):
    a = a.numpy()
    return Image.fromarray(a[..., 0], "L") if a.shape[2] == 1 else Image.fromarray(a, "RGB")


def from_pil(im):
    a = np.array(im)  # a writable copy: torch.from_numpy warns about PIL's read-only buffer
    if a.ndim == 2:
        a = a[..., None]
    return torch.from_numpy(np.ascontiguousarray(a))


def encode(root):
    inputs = st.load(os.path.join(root, "inputs.safetensors"))
    out = {}
    for line in open(os.path.join(root, "encode.txt")):
        name, fmt, mode, *options = line.split()
        a = inputs[name].numpy()
        if mode == "L":
            im = Image.fromarray(a[..., 0], "L")
        elif mode == "LA":
            im = Image.fromarray(a[..., :2], "LA")
        elif mode == "RGB":
            im = Image.fromarray(a[..., :3], "RGB")
        elif mode == "RGBA":
            im = Image.fromarray(a, "RGBA")
        elif mode == "P":
            im = Image.fromarray(a[..., :3], "RGB").quantize(64)
        elif mode == "CMYK":
            im = Image.fromarray(a, "CMYK")  # saved with Adobe's inverted CMYK, as PIL writes it
        else:
            sys.exit(f"preprocess_torch.py: unknown mode {mode}")
        path = os.path.join(root, f"{name}.{fmt}")
        if fmt == "jpg":
            extra = {}
            if "exif6" in options:
                exif = Image.Exif()
                exif[0x0112] = 6  # Orientation
                extra["exif"] = exif.tobytes()
            im.save(path, quality=95, progressive="progressive" in options,
                    subsampling=0 if "444" in options else -1, **extra)
        else:
            im.save(path)
        with Image.open(path) as back:
            out[name + ".rgb"] = from_pil(back.convert("RGB"))
            out[name + ".l"] = from_pil(back.convert("L"))
    st.save(os.path.join(root, "decoded.safetensors"), out)


def decode(root):
    out = {}
    for line in open(os.path.join(root, "decode.txt")):
        name = line.strip()
        try:
            with Image.open(os.path.join(root, name)) as im:
                out[name + ".rgb"] = from_pil(im.convert("RGB"))
        except Exception as e:  # noqa: BLE001 -- any failure is the answer
            out[name + ".error"] = torch.frombuffer(bytearray(f"{type(e).__name__}: {e}".encode()),
                                                    dtype=torch.uint8)
    st.save(os.path.join(root, "pil_decoded.safetensors"), out)


def resize(root):
    inputs = st.load(os.path.join(root, "inputs.safetensors"))
    out = {}
    for line in open(os.path.join(root, "resize.txt")):
        f = line.split()
        key, op, a = f[0], f[1], [int(v) for v in f[2:]]
        im = to_pil(inputs[key])
        if op == "resize":
            r = im.resize((a[1], a[0]), Image.Resampling.BILINEAR)
        elif op == "shorter":
            r = T.Resize(a[0])(im)
        elif op == "center":
            r = T.CenterCrop((a[0], a[1]))(im)
        elif op == "crop":
            r = im.crop((a[1], a[0], a[1] + a[3], a[0] + a[2]))
        elif op == "place":
            st_, sl, sh, sw, rh, rw, t, l, h, w, flip = a
            r = im.crop((sl, st_, sl + sw, st_ + sh)).resize((rw, rh), Image.Resampling.BILINEAR)
            r = r.crop((l, t, l + w, t + h))
            if flip:
                r = r.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        else:
            sys.exit(f"preprocess_torch.py: unknown op {op}")
        out[key] = from_pil(r)
    st.save(os.path.join(root, "outputs.safetensors"), out)


def evaluate(root):
    # One thread: these are small ops and a 2-core machine shared with other test processes;
    # measured 4-6x faster than two threads there.
    torch.set_num_threads(1)
    names = [n.strip() for n in open(os.path.join(root, "list.txt")) if n.strip()]
    tf = T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(), T.Normalize(MEAN, STD)])
    tf_gray = T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(), T.Normalize(MEAN[:1], STD[:1])])
    ref, result = {}, {}
    for fmt in ("png", "jpg"):
        files = [os.path.join(root, n) for n in names if n.endswith("." + fmt)]
        ref[fmt] = torch.stack([tf(Image.open(f).convert("RGB")) for f in files])
    pngs = [os.path.join(root, n) for n in names if n.endswith(".png")]
    ref["gray"] = torch.stack([tf_gray(Image.open(f).convert("L")) for f in pngs])
    decoded_path = os.path.join(root, "ours_decoded.safetensors")
    if os.path.exists(decoded_path):
        ours_decoded, worst = st.load(decoded_path), []
        for n in names:
            if n.endswith(".jpg"):
                with Image.open(os.path.join(root, n)) as im:
                    theirs = from_pil(im)
                mine = ours_decoded[n]
                worst.append(float((mine.int() - theirs.int()).abs().max()) if mine.shape == theirs.shape
                             else -1.0)
        result["jpg.decoded_max"] = torch.tensor(worst, dtype=torch.float32)
    ours = {k: st.load(os.path.join(root, f"ours_{k}.safetensors"))["x"] for k in ("png", "jpg", "gray")}
    for k in ("png", "jpg", "gray"):
        if ours[k].shape != ref[k].shape:
            sys.exit(f"preprocess_torch.py: ours_{k} has shape {list(ours[k].shape)}, "
                     f"torchvision {list(ref[k].shape)}")
        std = torch.tensor(STD[:ref[k].shape[1]]).view(1, -1, 1, 1)
        levels = (ours[k].double() - ref[k].double()).abs() * std * 255
        result[f"{k}.max_levels"] = levels.amax(dim=(1, 2, 3)).float()
        result[f"{k}.mean_levels"] = levels.mean(dim=(1, 2, 3)).float()
        result[f"{k}.identical"] = torch.tensor([int(torch.equal(ours[k], ref[k]))], dtype=torch.int64)
    torch.manual_seed(0)
    model = torchvision.models.mobilenet_v3_small().eval()
    with torch.inference_mode():
        for fmt in ("png", "jpg"):
            pred_ref = torch.cat([model(b).argmax(1) for b in ref[fmt].split(50)])
            # Identical inputs give identical outputs: skip the second forward then.
            pred_ours = pred_ref.clone() if torch.equal(ours[fmt], ref[fmt]) else \
                torch.cat([model(b).argmax(1) for b in ours[fmt].split(50)])
            result[f"{fmt}.pred_torchvision"] = pred_ref.to(torch.int64)
            result[f"{fmt}.pred_ours"] = pred_ours.to(torch.int64)
    st.save(os.path.join(root, "eval.safetensors"), result)


def main():
    modes = {"encode": encode, "decode": decode, "resize": resize, "eval": evaluate}
    if len(sys.argv) != 3 or sys.argv[1] not in modes:
        sys.exit("usage: preprocess_torch.py encode|decode|resize|eval DIR")
    modes[sys.argv[1]](sys.argv[2])


if __name__ == "__main__":
    main()
