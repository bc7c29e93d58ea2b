# Prints torchvision ImageFolder's view of a folder, for tests/test_datasets.cpp to compare with
# ours: the class names (tab separated) on the first line, then "label<TAB>path" per sample.
# Images are not opened (ImageFolder only lists them).
import sys

from torchvision.datasets import ImageFolder

ds = ImageFolder(sys.argv[1])
print("\t".join(ds.classes))
for path, label in ds.samples:
    print(f"{label}\t{path}")
