"""numpy reference for tests/test_detect_map.cpp: writes the IoU and recall thresholds exactly as
pycocotools' Params.setDetParams builds them, one float.hex() per line (10 IoU, then 101 recall).
Not a test by itself: the C++ test compares them bit for bit with src/detect/map_eval.cpp's.

Usage: map_thresholds_numpy.py OUT_FILE
"""
import sys

import numpy as np

iou = np.linspace(.5, 0.95, int(np.round((0.95 - .5) / .05)) + 1, endpoint=True)
rec = np.linspace(.0, 1.00, int(np.round((1.00 - .0) / .01)) + 1, endpoint=True)
with open(sys.argv[1], "w") as f:
    for v in list(iou) + list(rec):
        f.write(float(v).hex() + "\n")
