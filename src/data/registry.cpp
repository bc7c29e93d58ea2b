// The table of dataset kinds (registry.h), and what reads it here: open_dataset and
// detect_dataset_kind (declared in dataset.h). The formats themselves are in idx.cpp,
// cifar.cpp, image_folder.cpp, csv_dataset.cpp, synthetic.cpp and detection.cpp.
#include "data/registry.h"

#include <algorithm>
#include <array>
#include <cctype>

#include "core/check.h"
#include "core/text.h"
#include "data/cifar.h"
#include "data/csv_dataset.h"
#include "data/idx.h"
#include "data/image_folder.h"
#include "data/preprocess.h"
#include "data/shards.h"
#include "data/synthetic.h"

namespace fs = std::filesystem;

namespace mpicnn::data {

const std::vector<std::string>& fashion_mnist_classes() {
  static const std::vector<std::string> names = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                                 "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
  return names;
}

namespace {

// ---- recognising a path -----------------------------------------------------------------------

bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

bool has_idx_images(const fs::path& p) {
  if (is_file(p)) return lower(p.filename().string()).find("images-idx3") != std::string::npos;
  for (const char* n : {"train-images-idx3-ubyte", "train-images-idx3-ubyte.gz", "t10k-images-idx3-ubyte",
                        "t10k-images-idx3-ubyte.gz"})
    if (is_file(p / n)) return true;
  return false;
}

// Debian's dataset-fashion-mnist and the usual download folders are named after it.
bool named_fashion(const fs::path& p) {
  std::error_code ec;
  return lower(fs::absolute(p, ec).string()).find("fashion") != std::string::npos;
}

bool is_fashion_mnist(const fs::path& p) { return has_idx_images(p) && named_fashion(p); }
bool is_idx(const fs::path& p) { return has_idx_images(p); }

// A .csv file, or create_dataset's output folder (train.csv, test.csv or data.csv next to
// images/).
bool is_csv(const fs::path& p) {
  if (is_file(p)) return lower(p.filename().string()).ends_with(".csv");
  for (const char* f : {"train.csv", "test.csv", "data.csv"})
    if (is_file(p / f)) return true;
  return false;
}

bool is_cifar10(const fs::path& p) { return !is_file(p) && !find_cifar_folder(p.string(), 10).empty(); }
bool is_cifar100(const fs::path& p) { return !is_file(p) && !find_cifar_folder(p.string(), 100).empty(); }

bool is_image_folder(const fs::path& p) {
  if (is_file(p)) return false;
  std::error_code ec;
  for (fs::directory_iterator it(p, ec), end; !ec && it != end; it.increment(ec))
    if (!it->path().filename().string().starts_with('.') && fs::is_directory(it->path(), ec)) return true;
  return false;
}

bool is_shards(const fs::path& p) { return is_shard_path(p.string()); }

// ---- opening ----------------------------------------------------------------------------------

std::unique_ptr<Dataset> open_idx(const DatasetSpec& spec, const std::string& path) {
  std::vector<std::string> names;
  int classes = spec.idx_num_classes;
  if (spec.kind == "fashion-mnist") names = fashion_mnist_classes();
  if (spec.kind != "idx") classes = 10;
  const IdxFiles files = find_idx_files(path, spec.split);
  const std::string name = spec.kind + " " + (spec.split == "train" ? "train" : "test");
  return std::make_unique<InMemoryDataset>(read_idx(files, classes, names, name));
}

std::unique_ptr<Dataset> open_cifar(const DatasetSpec& spec, const std::string& path) {
  return std::make_unique<InMemoryDataset>(read_cifar(path, spec.kind == "cifar10" ? 10 : 100, spec.split));
}

std::unique_ptr<Dataset> open_image_folder(const DatasetSpec& spec, const std::string& path) {
  auto ds = std::make_unique<FileListDataset>(scan_image_folder(path, spec.split));
  if (spec.check_files) ds->check_files_exist();
  return ds;
}

// A CSV dataset given as a folder (create_dataset's output): SPLIT.csv, read whole, else
// data.csv, whose split column selects the rows. A file path is taken as it is.
std::unique_ptr<Dataset> open_csv(const DatasetSpec& spec, const std::string& path) {
  std::error_code ec;
  const fs::path p(path);
  std::string file = path, rows = spec.split;
  if (fs::is_directory(p, ec)) {
    if (rows != "all" && fs::is_regular_file(p / (rows + ".csv"), ec)) {
      file = (p / (rows + ".csv")).string(), rows = "all";
    } else {
      CHECK(fs::is_regular_file(p / "data.csv", ec), path, ": a CSV dataset folder without ",
            rows == "all" ? "" : rows + ".csv or ", "data.csv (split '", rows, "')");
      file = (p / "data.csv").string();
    }
  }
  return std::make_unique<FileListDataset>(read_csv_dataset(file, rows, spec.check_files));
}

std::unique_ptr<Dataset> open_synthetic(const DatasetSpec& spec, const std::string&) {
  return std::make_unique<SyntheticDataset>(spec.synthetic, spec.split);
}

std::vector<float> v(const std::array<float, 3>& a) { return {a.begin(), a.end()}; }

}  // namespace

const std::vector<DatasetKind>& dataset_kinds() {
  using T = Task;
  // name, task, default path, no path, detect order, recognise, open, mean, std, streamed
  static const std::vector<DatasetKind> kinds = {
      {"fashion-mnist", T::Classify, kFashionMnistDefaultPath, false, 2, is_fashion_mnist, open_idx,
       {kFashionMnistMean}, {kFashionMnistStd}, false},
      {"mnist", T::Classify, "", false, 0, nullptr, open_idx, {kMnistMean}, {kMnistStd}, false},
      // Unknown data: x / 255 to [-1, 1].
      {"idx", T::Classify, "", false, 3, is_idx, open_idx, {0.5f}, {0.5f}, false},
      {"imagefolder", T::Classify, "", false, 6, is_image_folder, open_image_folder,
       v(kImageNetMean), v(kImageNetStd), false},
      {"csv", T::Classify, "", false, 1, is_csv, open_csv, v(kImageNetMean), v(kImageNetStd), false},
      {"cifar10", T::Classify, "", false, 4, is_cifar10, open_cifar, v(kCifar10Mean), v(kCifar10Std), false},
      {"cifar100", T::Classify, "", false, 5, is_cifar100, open_cifar, v(kCifar10Mean),
       v(kCifar10Std), false},
      {"synthetic", T::Classify, "", true, 0, nullptr, open_synthetic, {0.5f}, {0.5f}, false},
      {"shards", T::Classify, "", false, 7, is_shards, nullptr, v(kImageNetMean), v(kImageNetStd), true},
      {"voc", T::Detection, "", false, 0, nullptr, nullptr, {}, {}, false},
      {"coco", T::Detection, "", false, 0, nullptr, nullptr, {}, {}, false},
  };
  return kinds;
}

const DatasetKind* find_dataset_kind(const std::string& name) {
  for (const DatasetKind& k : dataset_kinds())
    if (k.name == name) return &k;
  return nullptr;
}

std::vector<std::string> dataset_choices(std::optional<Task> task, bool streamed) {
  std::vector<std::string> names{"auto"};
  for (const DatasetKind& k : dataset_kinds())
    if ((!task || k.task == *task) && (streamed || !k.streamed)) names.push_back(k.name);
  return names;
}

std::string kinds_without_path() {
  std::string s;
  for (const DatasetKind& k : dataset_kinds())
    if (k.no_path || !k.default_path.empty()) s += (s.empty() ? "" : " and ") + k.name;
  return s;
}

std::string detect_dataset_kind(const std::string& path) {
  CHECK(!path.empty(), "no dataset path given");
  if (path.find('{') != std::string::npos && is_shard_path(path)) return "shards";  // a pattern names no file
  std::error_code ec;
  const fs::path p(path);
  CHECK(fs::exists(p, ec), path, ": no such file or folder");
  const bool file = fs::is_regular_file(p, ec);
  CHECK(file || fs::is_directory(p, ec), path, ": neither a file nor a folder");
  std::vector<const DatasetKind*> order;
  for (const DatasetKind& k : dataset_kinds())
    if (k.detect_order > 0) order.push_back(&k);
  std::sort(order.begin(), order.end(),
            [](const DatasetKind* a, const DatasetKind* b) { return a->detect_order < b->detect_order; });
  for (const DatasetKind* k : order)
    if (k->recognise(p)) return k->name;
  if (file) {
    if (lower(p.filename().string()).ends_with(".bin"))
      FAIL(path, ": a CIFAR .bin file; give the folder that holds it");
    FAIL(path, ": cannot tell the dataset format of this file (a .csv file or an IDX images file is expected); "
         "name the kind");
  }
  FAIL(path, ": cannot tell the dataset format (no IDX files, CIFAR .bin files or class subfolders); name the kind");
}

std::unique_ptr<Dataset> open_dataset(const DatasetSpec& spec) {
  const DatasetKind* k = find_dataset_kind(spec.kind);
  if (k && k->no_path && k->open) return k->open(spec, "");
  const std::string path = spec.path.empty() && k ? k->default_path : spec.path;
  CHECK(!path.empty(), "no dataset path given (kind ", spec.kind, ")");
  if (spec.kind == "auto") {
    DatasetSpec detected = spec;
    detected.kind = detect_dataset_kind(path);
    return open_dataset(detected);
  }
  CHECK(!k || !k->streamed, path, ": tar shards are read as a stream by ./train only; unpack them into an image "
        "folder for this (data_tools: shards unpack)");
  if (!k || !k->open) {
    FAIL("unknown dataset kind '", spec.kind, "' (", join(dataset_choices(Task::Classify, /*streamed=*/false), ", "), ")");
  }
  return k->open(spec, path);
}

}  // namespace mpicnn::data
