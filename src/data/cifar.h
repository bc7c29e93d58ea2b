// CIFAR-10 and CIFAR-100 in their binary form (records of label byte(s) + 3072 bytes of
// 32x32 RGB, channel-major), read into an InMemoryData (transposed to (H, W, C)).
// Not the Python pickle form.
#pragma once
#include <string>

#include "data/dataset.h"

namespace mpicnn::data {

// `classes` is 10 or 100. `path` is the folder holding the .bin files (data_batch_1..5.bin and
// test_batch.bin; train.bin and test.bin for CIFAR-100) or the folder holding
// cifar-10-batches-bin / cifar-100-binary. Class names come from batches.meta.txt /
// fine_label_names.txt when present, else "0", "1", ... CIFAR-100 uses the fine labels.
InMemoryData read_cifar(const std::string& path, int classes, const std::string& split);

// The folder that actually holds the .bin files of CIFAR-`classes`, or "" when `path` is
// not one (used by auto-detection).
std::string find_cifar_folder(const std::string& path, int classes);

}  // namespace mpicnn::data
