"""Deterministic "photograph-like" test images (smooth gradients, blurred shapes, texture and
sensor-like noise; RGB and gray; non-square sizes), written as PNG and JPEG with PIL.
Not real photographs and not a dataset: inputs for the image tests and bench/compare_image.sh.

Usage: photo_images.py OUTDIR COUNT [--formats png,jpg] [--sizes 500x375,640x480,...]
                      [--gray-every K] [--quality Q] [--png-level L] [--seed S]
Writes OUTDIR/img_NNNN.<fmt> (image i is identical in every format) and OUTDIR/list.txt with
one file name per line, in order.
"""
import argparse
import os

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

# (width, height): landscape, portrait, square, small (upscaled by Resize(256)), odd sizes.
DEFAULT_SIZES = ["500x375", "375x500", "333x500", "640x480", "480x640", "500x333", "256x256",
                 "300x224", "120x90", "257x383"]


def photo(rng, w, h, gray):
    """One image: a smooth colour field, a few blurred shapes, fine texture, mild noise."""
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.zeros((h, w, 3), np.float32)
    # Smooth background: a sum of a few low-frequency waves per channel (sky/wall-like).
    for c in range(3):
        base = rng.uniform(40, 200)
        field = np.full((h, w), base, np.float32)
        for _ in range(3):
            fx, fy = rng.uniform(0.2, 2.5, 2) * np.pi / max(w, h)
            ph = rng.uniform(0, 2 * np.pi)
            field += rng.uniform(10, 50) * np.sin(fx * xx + fy * yy + ph)
        img[..., c] = field
    canvas = Image.fromarray(np.clip(img, 0, 255).astype(np.uint8), "RGB")
    # Shapes: ellipses, rectangles and polygons in random colours, then blurred (objects).
    layer = canvas.copy()
    draw = ImageDraw.Draw(layer)
    for _ in range(rng.integers(4, 12)):
        x0, y0 = rng.uniform(-0.2, 1.0) * w, rng.uniform(-0.2, 1.0) * h
        x1, y1 = x0 + rng.uniform(0.05, 0.6) * w, y0 + rng.uniform(0.05, 0.6) * h
        colour = tuple(int(v) for v in rng.integers(0, 256, 3))
        kind = rng.integers(0, 3)
        if kind == 0:
            draw.ellipse([x0, y0, x1, y1], fill=colour)
        elif kind == 1:
            draw.rectangle([x0, y0, x1, y1], fill=colour)
        else:
            pts = [(float(rng.uniform(x0, x1)), float(rng.uniform(y0, y1))) for _ in range(5)]
            draw.polygon(pts, fill=colour)
    layer = layer.filter(ImageFilter.GaussianBlur(radius=float(rng.uniform(0.5, 4.0))))
    arr = np.asarray(layer).astype(np.float32)
    # Texture at two scales: low-resolution noise upsampled (foliage, fabric, grain), with a
    # strength drawn per image so file sizes spread like photographs' (JPEG q90 ~30-120 KB).
    for lo, hi, strength in ((4, 16, 0.25), (1, 4, 0.3)):
        step = int(rng.integers(lo, hi + 1))
        th, tw = max(2, h // step), max(2, w // step)
        tex = rng.normal(0, 1, (th, tw)).astype(np.float32)
        tex = ((tex - tex.min()) / (np.ptp(tex) + 1e-6) * 255).astype(np.uint8)
        tex = Image.fromarray(tex, "L").resize((w, h), Image.Resampling.BICUBIC)
        tex = np.asarray(tex).astype(np.float32)
        arr += rng.uniform(0.0, strength) * (tex[..., None] - 127.5)
    # Sensor-like noise, a little per pixel.
    arr += rng.normal(0, rng.uniform(1.0, 8.0), arr.shape).astype(np.float32)
    out = Image.fromarray(np.clip(arr + 0.5, 0, 255).astype(np.uint8), "RGB")
    return out.convert("L") if gray else out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir")
    ap.add_argument("count", type=int)
    ap.add_argument("--formats", default="png,jpg")
    ap.add_argument("--sizes", default=",".join(DEFAULT_SIZES))
    ap.add_argument("--gray-every", type=int, default=7, help="every K-th image is gray (0: none)")
    ap.add_argument("--quality", type=int, default=90)
    ap.add_argument("--png-level", type=int, default=6, help="zlib level (tests use 1: faster)")
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()
    sizes = [tuple(int(v) for v in s.split("x")) for s in args.sizes.split(",")]
    formats = args.formats.split(",")
    os.makedirs(args.outdir, exist_ok=True)
    names = []
    for i in range(args.count):
        rng = np.random.default_rng([args.seed, i])
        w, h = sizes[i % len(sizes)]
        gray = args.gray_every > 0 and i % args.gray_every == args.gray_every - 1
        im = photo(rng, w, h, gray)
        for fmt in formats:
            name = f"img_{i:04d}.{fmt}"
            path = os.path.join(args.outdir, name)
            if fmt == "jpg":
                im.save(path, quality=args.quality)
            else:
                im.save(path, compress_level=args.png_level)
            names.append(name)
    with open(os.path.join(args.outdir, "list.txt"), "w") as fh:
        fh.write("\n".join(names) + "\n")


if __name__ == "__main__":
    main()
