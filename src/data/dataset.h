// The Dataset interface (indexed, labelled samples with thread-safe const access), its two
// concrete building blocks (samples held in one flat buffer; a list of image files) and
// open_dataset(), which opens a kind of data/registry.h (registry.cpp). Not a loader:
// batching, threads and transforms are in loader.h; the formats themselves are in idx.h,
// cifar.h, image_folder.h, csv_dataset.h, synthetic.h.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "data/image.h"

namespace mpicnn::data {

// Every method is const and safe to call from several loader threads at once.
class Dataset {
 public:
  virtual ~Dataset() = default;

  virtual size_t size() const = 0;
  virtual int label(size_t i) const = 0;  // in [0, num_classes())
  virtual const std::vector<std::string>& class_names() const = 0;
  int num_classes() const { return int(class_names().size()); }

  // Where sample i came from, for error messages and prediction CSVs: a file path, or
  // "file#record" for a record inside a container file (IDX, CIFAR).
  virtual std::string source(size_t i) const = 0;

  // Sample size when every sample has the same one; 0 when sizes vary (image files).
  virtual int channels() const { return 0; }
  virtual int height() const { return 0; }
  virtual int width() const { return 0; }

  // read() fetches the raw bytes of sample i (the encoded file for file datasets, the (H, W, C)
  // pixels for in-memory ones); decode() turns them into an image with `channels` channels (1
  // or 3; 0 keeps the sample's own). They are separate because the evaluation pipeline reads
  // on one rank and decodes on another. Errors name source(i).
  virtual std::vector<uint8_t> read(size_t i) const = 0;
  virtual Image decode(std::span<const uint8_t> bytes, size_t i, int channels) const = 0;
  Image load(size_t i, int channels) const { return decode(read(i), i, channels); }

  // Sample i's index in the full dataset this one was cut from (a shard); i itself otherwise.
  // Per-sample random draws (augmentation) key on it, so they do not depend on the sharding.
  virtual uint64_t id(size_t i) const { return i; }

  // One line for logs: "fashion-mnist train: 60000 samples, 10 classes, 1x28x28".
  virtual std::string describe() const;
};

// ---- building block 1: N fixed-size samples in one flat buffer (IDX, CIFAR) ----------------

// Plain data, so that rank 0 can read a dataset and scatter shards of it (serialize_* below,
// or the flat vectors directly). Pixels are (N, H, W, C), the layout of Image, so read() is a
// plain slice and decode() a copy; CIFAR's (C, H, W) records are transposed once when read.
struct InMemoryData {
  std::string name;                      // for describe(): "cifar10 test"
  int channels = 0, height = 0, width = 0;
  std::vector<uint8_t> pixels;           // (N, H, W, C)
  std::vector<int32_t> labels;           // (N)
  std::vector<std::string> class_names;  // num_classes entries
  // source(i) = files[file_index[i]] + "#" + record[i]: the container file and the record
  // number inside it, kept per sample so that a shard still names where its samples came from.
  std::vector<std::string> files;
  std::vector<uint32_t> file_index;  // (N)
  std::vector<uint64_t> record;      // (N)
  std::vector<uint64_t> ids;         // (N), or empty for 0..N-1: see Dataset::id

  size_t size() const { return labels.size(); }
  size_t sample_bytes() const { return size_t(channels) * height * width; }
  // The samples at `indices`, in that order (a shard); ids keep their original ids.
  InMemoryData subset(std::span<const uint64_t> indices) const;
};

class InMemoryDataset : public Dataset {
 public:
  explicit InMemoryDataset(InMemoryData data);  // validates sizes and labels
  const InMemoryData& data() const { return d_; }

  size_t size() const override { return d_.size(); }
  int label(size_t i) const override;
  const std::vector<std::string>& class_names() const override { return d_.class_names; }
  std::string source(size_t i) const override;
  uint64_t id(size_t i) const override { return d_.ids.empty() ? i : d_.ids[i]; }
  int channels() const override { return d_.channels; }
  int height() const override { return d_.height; }
  int width() const override { return d_.width; }
  std::vector<uint8_t> read(size_t i) const override;
  Image decode(std::span<const uint8_t> bytes, size_t i, int channels) const override;
  std::string describe() const override;

 private:
  InMemoryData d_;
};

// ---- building block 2: a list of image files with labels (image folder, CSV) --------------

struct FileListData {
  std::string name;                      // for describe(): "data/faces/train.csv"
  std::vector<std::string> paths;        // (N) image files
  std::vector<int32_t> labels;           // (N)
  std::vector<std::string> class_names;  // num_classes entries
  std::vector<uint64_t> ids;             // (N), or empty for 0..N-1: see Dataset::id

  size_t size() const { return labels.size(); }
  FileListData subset(std::span<const uint64_t> indices) const;
};

class FileListDataset : public Dataset {
 public:
  explicit FileListDataset(FileListData data);  // validates sizes and labels
  const FileListData& data() const { return d_; }

  size_t size() const override { return d_.size(); }
  int label(size_t i) const override;
  const std::vector<std::string>& class_names() const override { return d_.class_names; }
  std::string source(size_t i) const override;
  uint64_t id(size_t i) const override { return d_.ids.empty() ? i : d_.ids[i]; }
  std::vector<uint8_t> read(size_t i) const override;  // the whole file
  Image decode(std::span<const uint8_t> bytes, size_t i, int channels) const override;
  std::string describe() const override;

  // Fails on the first file that is missing or not a regular file, naming it. Optional: a
  // missing file otherwise shows up when the loader reaches it.
  void check_files_exist() const;

 private:
  FileListData d_;
};

// An (H, W, C) pixel buffer as an Image with `channels` channels (0 keeps c); a buffer of
// the wrong size is an Error naming `name`. Shared by the datasets that hold raw pixels.
Image image_from_pixels(std::span<const uint8_t> pixels, int h, int w, int c, int channels,
                        const std::string& name);

// Byte buffers for MPI (Bcast / Scatterv of shards). Native byte order: every rank of a job
// runs on the same architecture. deserialize_* validates and fails with a clear line.
std::vector<uint8_t> serialize(const InMemoryData& d);
std::vector<uint8_t> serialize(const FileListData& d);
InMemoryData deserialize_in_memory(std::span<const uint8_t> bytes);
FileListData deserialize_file_list(std::span<const uint8_t> bytes);

// ---- opening a dataset by kind and path -----------------------------------------------------

struct SyntheticSpec {
  uint64_t seed = 0;
  size_t train_size = 1024, test_size = 256;
  int classes = 10, channels = 3, height = 32, width = 32;
};

inline constexpr const char* kFashionMnistDefaultPath = "/usr/share/datasets/fashion-mnist";
// Samples in a training stream's shuffle buffer over tar shards (./train --shuffle-buffer), as
// WebDataset's usual shuffle(1000).
inline constexpr size_t kDefaultShuffleBuffer = 1000;

struct DatasetSpec {
  // A classification kind of data/registry.h, or "auto": the kind whose files the path holds
  // (IDX file names, a .csv file, CIFAR .bin files, class subfolders).
  std::string kind = "auto";
  std::string path;  // empty for fashion-mnist means kFashionMnistDefaultPath
  // "train" or "test". "val" is test's other name for IDX, CIFAR and synthetic data, and an
  // image folder's val/ stands in for a missing test/ (and the reverse); a CSV split column is
  // matched literally. An image folder without train/ and test/ folders, or a CSV without a
  // split column, holds one split: it is returned for "train", and asking for "test" is an
  // error (never train data evaluated as test data). "all" takes the path as it is: every CSV
  // row, an image folder's root; apps evaluating a file the user named should ask for it.
  std::string split = "train";
  int idx_num_classes = 10;        // IDX labels must be below this
  bool check_files = false;        // CSV / image folder: stat every file when opening
  size_t shuffle_buffer = kDefaultShuffleBuffer;  // tar shards: a training stream's shuffle buffer
  SyntheticSpec synthetic;
};

std::unique_ptr<Dataset> open_dataset(const DatasetSpec& spec);

// The kind "auto" resolves to for `path` (without reading the samples); an Error saying why
// when no format fits.
std::string detect_dataset_kind(const std::string& path);

// Fashion-MNIST's class names, in label order.
const std::vector<std::string>& fashion_mnist_classes();

}  // namespace mpicnn::data
