"""torchvision reference for tests/test_detect_data.cpp, computed at test time. Not a test by
itself: it writes what torchvision makes of a Pascal VOC folder, and the C++ test compares.

Usage: detect_data_torch.py VOC_DIR OUT_DIR
  For every VOC_DIR/annotations/*.xml (sorted by name), parsed with torchvision's
  VOCDetection.parse_voc_xml and read as the VOC tutorials and the face-mask notebook do (values
  as-is, float): OUT_DIR/voc.txt gets one line "XML FILENAME W H N [NAME X1 Y1 X2 Y2 DIFFICULT]*N".
  For each image: OUT_DIR/STEM.f32 is to_tensor(Image.open(f).convert("RGB")) (3, H, W) float32,
  OUT_DIR/STEM.flip.f32 the same after F.hflip, and OUT_DIR/STEM.boxes.f32 the boxes (N, 4) after
  torchvision's detection reference RandomHorizontalFlip (boxes[:, [0, 2]] = W - boxes[:, [2, 0]]).
"""
import os
import sys
import xml.etree.ElementTree as ET

import numpy as np
import torch
import torchvision.transforms.functional as F
from PIL import Image
from torchvision.datasets import VOCDetection


def main():
    voc, out = sys.argv[1], sys.argv[2]
    lines = []
    for xml in sorted(os.listdir(os.path.join(voc, "annotations"))):
        if not xml.endswith(".xml"):
            continue
        ann = VOCDetection.parse_voc_xml(ET.parse(os.path.join(voc, "annotations", xml)).getroot())["annotation"]
        objects = ann.get("object", [])
        if isinstance(objects, dict):
            objects = [objects]
        boxes = [[float(o["bndbox"][k]) for k in ("xmin", "ymin", "xmax", "ymax")] for o in objects]
        fields = [xml, ann["filename"], ann["size"]["width"], ann["size"]["height"], str(len(objects))]
        for o, b in zip(objects, boxes):
            fields += [o["name"]] + [repr(v) for v in b] + [o.get("difficult", "0")]
        lines.append(" ".join(fields))

        img = Image.open(os.path.join(voc, "images", ann["filename"])).convert("RGB")
        stem = os.path.splitext(xml)[0]
        F.to_tensor(img).numpy().astype(np.float32).tofile(os.path.join(out, stem + ".f32"))
        flipped = F.hflip(img)
        F.to_tensor(flipped).numpy().astype(np.float32).tofile(os.path.join(out, stem + ".flip.f32"))
        # references/detection/transforms.py, RandomHorizontalFlip.forward
        _, _, width = F.get_dimensions(flipped)
        t = torch.tensor(boxes, dtype=torch.float32).reshape(-1, 4)
        t[:, [0, 2]] = width - t[:, [2, 0]]
        t.numpy().tofile(os.path.join(out, stem + ".boxes.f32"))
    with open(os.path.join(out, "voc.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
