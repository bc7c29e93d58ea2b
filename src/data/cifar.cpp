// CIFAR-10 / CIFAR-100 binary records -> InMemoryData.
// Not a downloader: the files must already be on disk.
#include "data/cifar.h"

#include <filesystem>
#include <fstream>

#include "core/check.h"

namespace fs = std::filesystem;

namespace mpicnn::data {

namespace {

constexpr int kSide = 32, kPlane = kSide * kSide, kPixels = 3 * kPlane;

bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

// Names one per line; trailing blank lines (batches.meta.txt ends with some) are dropped.
std::vector<std::string> read_names(const fs::path& file, int classes) {
  std::ifstream in(file);
  CHECK(in, file.string(), ": cannot open");
  std::vector<std::string> names;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    names.push_back(line);
  }
  while (!names.empty() && names.back().empty()) names.pop_back();
  CHECK(int(names.size()) == classes, file.string(), ": ", names.size(), " class names, expected ", classes);
  return names;
}

}  // namespace

std::string find_cifar_folder(const std::string& path, int classes) {
  const fs::path p(path);
  const char* sub = classes == 10 ? "cifar-10-batches-bin" : "cifar-100-binary";
  const char* marker1 = classes == 10 ? "data_batch_1.bin" : "train.bin";
  const char* marker2 = classes == 10 ? "test_batch.bin" : "test.bin";
  for (const fs::path& dir : {p, p / sub})
    if (is_file(dir / marker1) || is_file(dir / marker2)) return dir.string();
  return "";
}

InMemoryData read_cifar(const std::string& path, int classes, const std::string& split) {
  CHECK(classes == 10 || classes == 100, "CIFAR has 10 or 100 classes, not ", classes);
  const std::string kind = classes == 10 ? "cifar10" : "cifar100";
  std::error_code ec;
  CHECK(fs::is_directory(path, ec), path, ": no such folder (", kind, ")");
  CHECK(split == "train" || split == "test" || split == "val", path, ": unknown split '", split,
        "' for ", kind, " (train or test)");
  const bool train = split == "train";
  std::string dir = find_cifar_folder(path, classes);
  if (dir.empty()) dir = path;  // so that the missing-file error names the expected file here

  std::vector<std::string> names;
  if (classes == 10) {
    if (train)
      for (int k = 1; k <= 5; ++k) names.push_back("data_batch_" + std::to_string(k) + ".bin");
    else
      names.push_back("test_batch.bin");
  } else {
    names.push_back(train ? "train.bin" : "test.bin");
  }
  // CIFAR-10: label, pixels. CIFAR-100: coarse label, fine label, pixels.
  const size_t label_bytes = classes == 10 ? 1 : 2;
  const size_t rec = label_bytes + kPixels;

  InMemoryData d;
  d.name = kind + " " + (train ? "train" : "test");
  d.channels = 3;
  d.height = d.width = kSide;
  for (const std::string& n : names) {
    const std::string file = (fs::path(dir) / n).string();
    CHECK(is_file(file), file, ": missing (", kind, " ", split, " file)");
    const std::vector<uint8_t> bytes = read_file_bytes(file);
    CHECK(!bytes.empty() && bytes.size() % rec == 0, file, ": size ", bytes.size(),
          " is not a positive multiple of the ", rec, "-byte ", kind, " record (truncated file?)");
    const size_t count = bytes.size() / rec, first = d.labels.size();
    const uint32_t file_no = uint32_t(d.files.size());
    d.files.push_back(file);
    d.pixels.resize((first + count) * kPixels);
    d.labels.resize(first + count);
    for (size_t r = 0; r < count; ++r) {
      const uint8_t* in = bytes.data() + r * rec;
      if (classes == 100)
        CHECK(in[0] < 20, file, ": coarse label ", int(in[0]), " of record ", r, " is outside [0, 20)");
      const int label = in[label_bytes - 1];
      CHECK(label < classes, file, ": label ", label, " of record ", r, " is outside [0, ", classes, ")");
      d.labels[first + r] = label;
      d.file_index.push_back(file_no);
      d.record.push_back(r);
      // (C, H, W) record -> (H, W, C) sample.
      const uint8_t* src = in + label_bytes;
      uint8_t* dst = d.pixels.data() + (first + r) * kPixels;
      for (int i = 0; i < kPlane; ++i)
        for (int c = 0; c < 3; ++c) dst[3 * i + c] = src[c * kPlane + i];
    }
  }
  const fs::path meta = fs::path(dir) / (classes == 10 ? "batches.meta.txt" : "fine_label_names.txt");
  if (is_file(meta)) {
    d.class_names = read_names(meta, classes);
  } else {
    for (int k = 0; k < classes; ++k) d.class_names.push_back(std::to_string(k));
  }
  return d;
}

}  // namespace mpicnn::data
