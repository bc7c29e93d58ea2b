// The stratified, seeded validation hold-out (see holdout.h).
#include "data/holdout.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/check.h"
#include "core/rng.h"
#include "data/csv_dataset.h"

namespace mpicnn::data {

namespace fs = std::filesystem;

uint64_t holdout_count(uint64_t n, double fraction) {
  CHECK(fraction >= 0 && fraction < 1, "validation fraction ", fraction, " is not in [0, 1)");
  if (fraction <= 0 || n < 2) return 0;
  const uint64_t k = uint64_t(std::llround(fraction * double(n)));
  return std::clamp<uint64_t>(k, 1, n - 1);
}

std::vector<uint64_t> holdout_indices(std::span<const int32_t> labels, double fraction, uint64_t seed) {
  int32_t max_label = -1;
  for (const int32_t l : labels) {
    CHECK(l >= 0, "holdout_indices: negative label ", l);
    max_label = std::max(max_label, l);
  }
  std::vector<std::vector<uint64_t>> by_class(size_t(max_label + 1));
  for (size_t i = 0; i < labels.size(); ++i) by_class[size_t(labels[i])].push_back(i);
  std::vector<uint64_t> held;
  for (size_t c = 0; c < by_class.size(); ++c) {
    std::vector<uint64_t>& v = by_class[c];
    const uint64_t k = holdout_count(v.size(), fraction);
    if (k == 0) continue;
    const Rng rng(seed, stream_id("validation-split/" + std::to_string(c)));
    for (uint64_t i = v.size() - 1; i > 0; --i) std::swap(v[i], v[rng.below(i, i + 1)]);
    held.insert(held.end(), v.begin(), v.begin() + int64_t(k));
  }
  std::sort(held.begin(), held.end());
  return held;
}

std::vector<uint64_t> holdout_indices(const Dataset& d, double fraction, uint64_t seed) {
  std::vector<int32_t> labels(d.size());
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = d.label(i);
  return holdout_indices(labels, fraction, seed);
}

std::vector<uint64_t> complement(uint64_t n, std::span<const uint64_t> held) {
  std::vector<uint64_t> rest;
  rest.reserve(n - std::min<uint64_t>(n, held.size()));
  size_t j = 0;
  for (uint64_t i = 0; i < n; ++i) {
    if (j < held.size() && held[j] == i) {
      ++j;
      continue;
    }
    rest.push_back(i);
  }
  return rest;
}

std::unique_ptr<Dataset> subset_dataset(const Dataset& d, std::span<const uint64_t> indices) {
  if (const auto* m = dynamic_cast<const InMemoryDataset*>(&d))
    return std::make_unique<InMemoryDataset>(m->data().subset(indices));
  if (const auto* f = dynamic_cast<const FileListDataset*>(&d))
    return std::make_unique<FileListDataset>(f->data().subset(indices));
  FAIL(d.describe(), ": cannot take a subset of this kind of dataset");
}

namespace {

// data's samples of `classes`, relabelled by position in `classes`.
template <class Data>
Data relabelled_subset(const Data& data, std::span<const int> classes) {
  std::vector<int32_t> new_label(data.class_names.size(), -1);
  std::vector<std::string> names;
  for (size_t k = 0; k < classes.size(); ++k) {
    const int c = classes[k];
    CHECK(c >= 0 && size_t(c) < new_label.size(), data.name, ": no class ", c, " (it has ",
          new_label.size(), ")");
    CHECK(new_label[size_t(c)] < 0, data.name, ": class ", c, " is listed twice");
    new_label[size_t(c)] = int32_t(k);
    names.push_back(data.class_names[size_t(c)]);
  }
  std::vector<uint64_t> keep;
  for (size_t i = 0; i < data.size(); ++i)
    if (new_label[size_t(data.labels[i])] >= 0) keep.push_back(i);
  Data out = data.subset(keep);
  for (int32_t& l : out.labels) l = new_label[size_t(l)];
  std::string list;
  for (const int c : classes) {
    if (!list.empty()) list += ',';
    list += std::to_string(c);
  }
  out.name += " (classes " + list + ")";
  out.class_names = std::move(names);
  return out;
}

}  // namespace

std::unique_ptr<Dataset> class_subset(const Dataset& d, std::span<const int> classes) {
  CHECK(!classes.empty(), d.describe(), ": no classes to keep");
  if (const auto* m = dynamic_cast<const InMemoryDataset*>(&d))
    return std::make_unique<InMemoryDataset>(relabelled_subset(m->data(), classes));
  if (const auto* f = dynamic_cast<const FileListDataset*>(&d))
    return std::make_unique<FileListDataset>(relabelled_subset(f->data(), classes));
  FAIL(d.describe(), ": cannot take a class subset of this kind of dataset");
}

bool holds_one_split(const DatasetSpec& spec) {
  const std::string kind = spec.kind == "auto" ? detect_dataset_kind(spec.path) : spec.kind;
  std::error_code ec;
  const fs::path p(spec.path);
  if (kind == "imagefolder")
    return !fs::is_directory(p / "train", ec) && !fs::is_directory(p / "test", ec) &&
           !fs::is_directory(p / "val", ec);
  if (kind != "csv") return false;
  fs::path file = p;
  if (fs::is_directory(p, ec)) {
    if (fs::is_regular_file(p / "test.csv", ec)) return false;
    if (!fs::is_regular_file(p / "data.csv", ec)) return fs::is_regular_file(p / "train.csv", ec);
    file = p / "data.csv";
  }
  std::ifstream in(file, std::ios::binary);
  std::string header;
  if (!in || !std::getline(in, header)) return false;  // opening it reports what is wrong
  if (header.starts_with("\xEF\xBB\xBF")) header.erase(0, 3);
  const std::vector<CsvRecord> recs = parse_csv(header, file.string());
  if (recs.empty()) return false;
  for (std::string f : recs[0].fields) {
    f.erase(0, f.find_first_not_of(" \t\r"));
    f.erase(f.find_last_not_of(" \t\r") + 1);
    if (f == "split") return false;
  }
  return true;
}

std::string describe_holdout(double fraction, uint64_t held) {
  std::ostringstream s;
  s << fraction * 100 << "% held out, " << held << " image" << (held == 1 ? "" : "s") << ", stratified";
  return s.str();
}

}  // namespace mpicnn::data
