// The two dataset building blocks (in-memory samples, file lists) and their byte serialisation
// for MPI. Not opening a dataset by kind (registry.cpp) or the format readers (idx.cpp, ...).
#include "data/dataset.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "core/check.h"

namespace fs = std::filesystem;

namespace mpicnn::data {

std::string Dataset::describe() const {
  std::string s = std::to_string(size()) + " samples, " + std::to_string(num_classes()) + " classes";
  if (channels() > 0)
    s += ", " + std::to_string(channels()) + "x" + std::to_string(height()) + "x" + std::to_string(width());
  return s;
}

Image image_from_pixels(std::span<const uint8_t> pixels, int h, int w, int c, int channels, const std::string& name) {
  CHECK(pixels.size() == size_t(h) * w * c, name, ": ", pixels.size(), " bytes of pixels, expected ", h, "x", w,
        "x", c);
  CHECK(channels == 0 || channels == 1 || channels == 3, name, ": cannot convert to ", channels,
        " channels (1 or 3)");
  Image img(h, w, c);
  std::memcpy(img.pixels.data(), pixels.data(), pixels.size());
  if (channels == 0 || channels == c) return img;
  return convert_channels(img, channels);
}

// ---- InMemoryData / InMemoryDataset ---------------------------------------------------------

InMemoryData InMemoryData::subset(std::span<const uint64_t> indices) const {
  InMemoryData s;
  s.name = name;
  s.channels = channels;
  s.height = height;
  s.width = width;
  s.class_names = class_names;
  s.files = files;
  const size_t sb = sample_bytes();
  s.pixels.resize(indices.size() * sb);
  s.labels.reserve(indices.size());
  s.file_index.reserve(indices.size());
  s.record.reserve(indices.size());
  s.ids.reserve(indices.size());
  for (size_t j = 0; j < indices.size(); ++j) {
    const uint64_t i = indices[j];
    CHECK(i < size(), name, ": subset index ", i, " out of range (", size(), " samples)");
    std::memcpy(s.pixels.data() + j * sb, pixels.data() + i * sb, sb);
    s.labels.push_back(labels[i]);
    s.file_index.push_back(file_index[i]);
    s.record.push_back(record[i]);
    s.ids.push_back(ids.empty() ? i : ids[i]);
  }
  return s;
}

namespace {

// Separate from the constructor so deserialisation can validate without copying the pixels.
void validate(const InMemoryData& d) {
  const size_t n = d.labels.size();
  CHECK(d.channels == 1 || d.channels == 3, d.name, ": samples must have 1 or 3 channels, not ", d.channels);
  CHECK(d.height > 0 && d.width > 0, d.name, ": sample size ", d.height, "x", d.width, " is empty");
  CHECK(d.pixels.size() == n * d.sample_bytes(), d.name, ": ", d.pixels.size(), " bytes of pixels for ", n,
        " samples of ", d.sample_bytes(), " bytes");
  CHECK(!d.class_names.empty(), d.name, ": no classes");
  CHECK(d.ids.empty() || d.ids.size() == n, d.name, ": ", d.ids.size(), " ids for ", n, " samples");
  CHECK(d.file_index.size() == n && d.record.size() == n, d.name, ": source table has ", d.file_index.size(),
        " / ", d.record.size(), " entries for ", n, " samples");
  for (size_t i = 0; i < n; ++i) {
    CHECK(d.file_index[i] < d.files.size(), d.name, ": sample ", i, " names source file ", d.file_index[i],
          " of ", d.files.size());
    CHECK(d.labels[i] >= 0 && size_t(d.labels[i]) < d.class_names.size(), d.files[d.file_index[i]], "#",
          d.record[i], ": label ", d.labels[i], " is outside [0, ", d.class_names.size(), ")");
  }
}

void validate(const FileListData& d) {
  CHECK(d.paths.size() == d.labels.size(), d.name, ": ", d.paths.size(), " paths but ", d.labels.size(),
        " labels");
  CHECK(!d.class_names.empty(), d.name, ": no classes");
  CHECK(d.ids.empty() || d.ids.size() == d.paths.size(), d.name, ": ", d.ids.size(), " ids for ",
        d.paths.size(), " samples");
  for (size_t i = 0; i < d.paths.size(); ++i)
    CHECK(d.labels[i] >= 0 && size_t(d.labels[i]) < d.class_names.size(), d.paths[i], ": label ", d.labels[i],
          " is outside [0, ", d.class_names.size(), ")");
}

}  // namespace

InMemoryDataset::InMemoryDataset(InMemoryData data) : d_(std::move(data)) { validate(d_); }

int InMemoryDataset::label(size_t i) const {
  CHECK(i < size(), d_.name, ": sample ", i, " out of range (", size(), " samples)");
  return d_.labels[i];
}

std::string InMemoryDataset::source(size_t i) const {
  CHECK(i < size(), d_.name, ": sample ", i, " out of range (", size(), " samples)");
  return d_.files[d_.file_index[i]] + "#" + std::to_string(d_.record[i]);
}

std::vector<uint8_t> InMemoryDataset::read(size_t i) const {
  CHECK(i < size(), d_.name, ": sample ", i, " out of range (", size(), " samples)");
  const size_t sb = d_.sample_bytes();
  const uint8_t* p = d_.pixels.data() + i * sb;
  return {p, p + sb};
}

Image InMemoryDataset::decode(std::span<const uint8_t> bytes, size_t i, int channels) const {
  return image_from_pixels(bytes, d_.height, d_.width, d_.channels, channels, source(i));
}

std::string InMemoryDataset::describe() const { return d_.name + ": " + Dataset::describe(); }

// ---- FileListData / FileListDataset ---------------------------------------------------------

FileListData FileListData::subset(std::span<const uint64_t> indices) const {
  FileListData s;
  s.name = name;
  s.class_names = class_names;
  s.paths.reserve(indices.size());
  s.labels.reserve(indices.size());
  for (const uint64_t i : indices) {
    CHECK(i < size(), name, ": subset index ", i, " out of range (", size(), " samples)");
    s.paths.push_back(paths[i]);
    s.labels.push_back(labels[i]);
    s.ids.push_back(ids.empty() ? i : ids[i]);
  }
  return s;
}

FileListDataset::FileListDataset(FileListData data) : d_(std::move(data)) { validate(d_); }

int FileListDataset::label(size_t i) const {
  CHECK(i < size(), d_.name, ": sample ", i, " out of range (", size(), " samples)");
  return d_.labels[i];
}

std::string FileListDataset::source(size_t i) const {
  CHECK(i < size(), d_.name, ": sample ", i, " out of range (", size(), " samples)");
  return d_.paths[i];
}

std::vector<uint8_t> FileListDataset::read(size_t i) const { return read_file_bytes(source(i)); }

Image FileListDataset::decode(std::span<const uint8_t> bytes, size_t i, int channels) const {
  return decode_image(bytes, channels, source(i));
}

std::string FileListDataset::describe() const { return d_.name + ": " + Dataset::describe(); }

void FileListDataset::check_files_exist() const {
  std::error_code ec;
  for (const std::string& p : d_.paths) CHECK(fs::is_regular_file(p, ec), p, ": missing image file");
}

// ---- serialisation ----------------------------------------------------------------------------

namespace {

class Writer {
 public:
  void u64(uint64_t v) { raw(&v, sizeof v); }
  void raw(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
  }
  void str(const std::string& s) {
    u64(s.size());
    raw(s.data(), s.size());
  }
  template <typename T>
  void vec(const std::vector<T>& v) {
    u64(v.size());
    raw(v.data(), v.size() * sizeof(T));
  }
  void strings(const std::vector<std::string>& v) {
    u64(v.size());
    for (const std::string& s : v) str(s);
  }
  std::vector<uint8_t> out;
};

class Reader {
 public:
  Reader(std::span<const uint8_t> b, const char* what) : b_(b), what_(what) {}
  void raw(void* p, size_t n) {
    CHECK(n <= b_.size() - pos_, "serialized ", what_, ": truncated buffer");
    if (n) std::memcpy(p, b_.data() + pos_, n);  // p may be null for an empty vector
    pos_ += n;
  }
  uint64_t u64() {
    uint64_t v;
    raw(&v, sizeof v);
    return v;
  }
  // Sizes are checked against the bytes left before anything is allocated.
  uint64_t count(size_t elem) {
    const uint64_t n = u64();
    CHECK(n <= (b_.size() - pos_) / elem, "serialized ", what_, ": truncated buffer");
    return n;
  }
  std::string str() {
    std::string s(count(1), '\0');
    raw(s.data(), s.size());
    return s;
  }
  template <typename T>
  std::vector<T> vec() {
    std::vector<T> v(count(sizeof(T)));
    raw(v.data(), v.size() * sizeof(T));
    return v;
  }
  std::vector<std::string> strings() {
    std::vector<std::string> v(count(8));
    for (std::string& s : v) s = str();
    return v;
  }
  void done() { CHECK(pos_ == b_.size(), "serialized ", what_, ": ", b_.size() - pos_, " unexpected trailing bytes"); }

 private:
  std::span<const uint8_t> b_;
  size_t pos_ = 0;
  const char* what_;
};

constexpr uint64_t kInMemoryMagic = 0x31444d494e435049ull;  // "IPCNIMD1"
constexpr uint64_t kFileListMagic = 0x31444c464e435049ull;  // "IPCNFLD1"

}  // namespace

std::vector<uint8_t> serialize(const InMemoryData& d) {
  Writer w;
  w.u64(kInMemoryMagic);
  w.str(d.name);
  w.u64(uint64_t(d.channels));
  w.u64(uint64_t(d.height));
  w.u64(uint64_t(d.width));
  w.vec(d.pixels);
  w.vec(d.labels);
  w.strings(d.class_names);
  w.strings(d.files);
  w.vec(d.file_index);
  w.vec(d.record);
  w.vec(d.ids);
  return std::move(w.out);
}

std::vector<uint8_t> serialize(const FileListData& d) {
  Writer w;
  w.u64(kFileListMagic);
  w.str(d.name);
  w.strings(d.paths);
  w.vec(d.labels);
  w.strings(d.class_names);
  w.vec(d.ids);
  return std::move(w.out);
}

InMemoryData deserialize_in_memory(std::span<const uint8_t> bytes) {
  Reader r(bytes, "in-memory dataset");
  CHECK(r.u64() == kInMemoryMagic, "serialized in-memory dataset: bad magic");
  InMemoryData d;
  d.name = r.str();
  const uint64_t c = r.u64(), h = r.u64(), w = r.u64();
  CHECK(c <= 4 && h <= (1u << 20) && w <= (1u << 20), "serialized in-memory dataset: bad sample size");
  d.channels = int(c);
  d.height = int(h);
  d.width = int(w);
  d.pixels = r.vec<uint8_t>();
  d.labels = r.vec<int32_t>();
  d.class_names = r.strings();
  d.files = r.strings();
  d.file_index = r.vec<uint32_t>();
  d.record = r.vec<uint64_t>();
  d.ids = r.vec<uint64_t>();
  r.done();
  validate(d);
  return d;
}

FileListData deserialize_file_list(std::span<const uint8_t> bytes) {
  Reader r(bytes, "file-list dataset");
  CHECK(r.u64() == kFileListMagic, "serialized file-list dataset: bad magic");
  FileListData d;
  d.name = r.str();
  d.paths = r.strings();
  d.labels = r.vec<int32_t>();
  d.class_names = r.strings();
  d.ids = r.vec<uint64_t>();
  r.done();
  validate(d);
  return d;
}

}  // namespace mpicnn::data
