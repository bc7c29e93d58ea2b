// Image folders with torchvision ImageFolder semantics: one subfolder per class, classes
// indexed in sorted folder-name order, image files found recursively in os.walk order.
// Not a decoder: the result is a FileListData; images are decoded when loaded.
#pragma once
#include <string>

#include "data/dataset.h"

namespace mpicnn::data {

// Case-insensitive .jpg .jpeg .png .bmp (what decode_image reads).
bool has_image_extension(const std::string& filename);

// If `root` has a train/ or test/ folder, `split` picks one ("test" falls back to val/, "val"
// to test/); otherwise `root` itself is the only split, returned for "train". "all" always
// takes `root` as it is. Hidden files and folders are ignored, symlinks followed. Errors
// (missing split, no class folders, an empty class folder, train and test with different
// class folders) name the folder.
FileListData scan_image_folder(const std::string& root, const std::string& split);

}  // namespace mpicnn::data
