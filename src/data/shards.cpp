// Tar shards (shards.h): shard-set names and index, the one-shard reader and writer on libarchive.
#include "data/shards.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <map>

#include "core/check.h"
#include "core/text.h"
#include "io/atomic_file.h"

namespace fs = std::filesystem;

namespace mpicnn::data {

namespace {

constexpr size_t kMaxExpansion = 10'000'000;
constexpr size_t kReadBlock = size_t(1) << 20;  // libarchive's read size: large sequential reads

bool is_image_ext(const std::string& ext) {
  return ext == "jpg" || ext == "jpeg" || ext == "png" || ext == "bmp";
}

// WebDataset's split of a member name: the key is everything before the first dot of the
// file name (with its folder), the extension everything after it.
bool split_member(const std::string& name, std::string& key, std::string& ext) {
  const size_t slash = name.rfind('/');
  const size_t dot = name.find('.', slash == std::string::npos ? 0 : slash + 1);
  if (dot == std::string::npos || dot == 0 || dot + 1 == name.size()) return false;
  key = name.substr(0, dot);
  ext = lower(name.substr(dot + 1));
  return true;
}

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r\n");
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(" \t\r\n") - a + 1);
}

// The entries of a list file: one shard path per line (relative to the list's folder), blank
// lines and # comments skipped.
std::vector<std::string> read_list(const std::string& path) {
  std::ifstream in(path);
  CHECK(in, path, ": cannot read the shard list");
  std::vector<std::string> out;
  std::string line;
  const fs::path dir = fs::path(path).parent_path();
  while (std::getline(in, line)) {
    line = trim(line);
    if (line.empty() || line[0] == '#') continue;
    out.push_back(fs::path(line).is_absolute() ? line : (dir / line).string());
  }
  return out;
}

bool first_list_entry_is_tar(const fs::path& p) {
  std::ifstream in(p);
  std::string line;
  while (std::getline(in, line)) {
    line = trim(line);
    if (line.empty() || line[0] == '#') continue;
    return lower(line).ends_with(".tar");
  }
  return false;
}

std::vector<std::string> tar_files_in(const fs::path& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (fs::is_regular_file(it->path(), ec) && lower(it->path().filename().string()).ends_with(".tar"))
      out.push_back(it->path().string());
  std::sort(out.begin(), out.end());
  return out;
}

// The split a shard file of a folder without an index belongs to, by its name; "" for neither.
std::string split_of_name(const std::string& file) {
  const std::string n = lower(fs::path(file).filename().string());
  if (n.starts_with("train")) return "train";
  if (n.starts_with("test") || n.starts_with("val")) return "test";
  return "";
}

nlohmann::json read_index(const fs::path& file) {
  std::ifstream in(file);
  CHECK(in, file.string(), ": cannot read the shard index");
  try {
    nlohmann::json j = nlohmann::json::parse(in);
    CHECK(j.is_object() && j.contains("splits") && j["splits"].is_object() && j.contains("classes") &&
              j["classes"].is_array(),
          "not a shard index (\"splits\" and \"classes\" expected)");
    return j;
  } catch (const nlohmann::json::exception& e) {
    FAIL(file.string(), ": not a shard index (", e.what(), ")");
  } catch (const Error& e) {
    FAIL(file.string(), ": ", e.message());
  }
}

}  // namespace

std::string ShardSet::describe() const {
  return detail::concat(name, ": ", shards.size(), " tar shard", shards.size() == 1 ? "" : "s", ", ", size(),
                        " samples, ", class_names.size(), " classes");
}

nlohmann::json to_json(const ShardSet& s) {
  nlohmann::json files = nlohmann::json::array();
  for (const ShardFile& f : s.shards) files.push_back({{"path", f.path}, {"samples", f.samples}});
  return {{"name", s.name}, {"classes", s.class_names}, {"shards", files}};
}

ShardSet shard_set_from_json(const nlohmann::json& j) {
  ShardSet s;
  s.name = j.at("name");
  s.class_names = j.at("classes").get<std::vector<std::string>>();
  uint64_t id = 0;
  for (const auto& f : j.at("shards")) {
    s.shards.push_back({f.at("path"), f.at("samples"), id});
    id += s.shards.back().samples;
  }
  return s;
}

std::vector<std::string> expand_braces(const std::string& pattern) {
  const size_t open = pattern.find('{');
  if (open == std::string::npos) {
    CHECK(pattern.find('}') == std::string::npos, pattern, ": '}' without '{'");
    return {pattern};
  }
  const size_t close = pattern.find('}', open);
  CHECK(close != std::string::npos, pattern, ": '{' without '}'");
  const std::string body = pattern.substr(open + 1, close - open - 1);
  CHECK(body.find('{') == std::string::npos, pattern, ": nested braces");
  std::vector<std::string> alts;
  if (const size_t dots = body.find(".."); dots != std::string::npos) {
    const std::string a = body.substr(0, dots), b = body.substr(dots + 2);
    CHECK(all_digits(a) && all_digits(b) && a.size() <= 18 && b.size() <= 18, pattern, ": {", body,
          "} is not a range of numbers like {000000..000146}");
    const uint64_t lo = std::stoull(a), hi = std::stoull(b);
    CHECK(lo <= hi, pattern, ": the range {", body, "} goes down");
    CHECK(hi - lo < kMaxExpansion, pattern, ": the range {", body, "} is too long");
    const size_t width = a.size() > 1 && a[0] == '0' ? a.size() : 0;
    for (uint64_t i = lo; i <= hi; ++i) alts.push_back(zero_pad(i, int(width)));
  } else {
    size_t start = 0;
    while (true) {
      const size_t comma = body.find(',', start);
      alts.push_back(body.substr(start, comma - start));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    CHECK(alts.size() > 1, pattern, ": {", body, "} is neither a range {A..B} nor a list {a,b}");
  }
  const std::string head = pattern.substr(0, open);
  const std::vector<std::string> rest = expand_braces(pattern.substr(close + 1));
  CHECK(alts.size() * rest.size() <= kMaxExpansion, pattern, ": expands to too many names");
  std::vector<std::string> out;
  out.reserve(alts.size() * rest.size());
  for (const std::string& alt : alts)
    for (const std::string& r : rest) out.push_back(head + alt + r);
  return out;
}

bool is_shard_path(const std::string& path) {
  if (path.find('{') != std::string::npos) return lower(path).ends_with(".tar");
  std::error_code ec;
  const fs::path p(path);
  const std::string n = lower(p.filename().string());
  if (fs::is_regular_file(p, ec)) return n.ends_with(".tar") || (n.ends_with(".txt") && first_list_entry_is_tar(p));
  if (!fs::is_directory(p, ec)) return false;
  if (fs::is_regular_file(p / kShardIndexName, ec)) return true;
  for (fs::directory_iterator it(p, ec), end; !ec && it != end; it.increment(ec))
    if (!it->path().filename().string().starts_with('.') && fs::is_directory(it->path(), ec)) return false;
  return !tar_files_in(p).empty();
}

bool shards_hold_one_split(const std::string& path) {
  std::error_code ec;
  const fs::path p(path);
  if (path.find('{') != std::string::npos || !fs::is_directory(p, ec)) return true;
  if (fs::is_regular_file(p / kShardIndexName, ec)) {
    const nlohmann::json j = read_index(p / kShardIndexName);
    return !j["splits"].contains("train") || !j["splits"].contains("test");
  }
  for (const std::string& f : tar_files_in(p))
    if (!split_of_name(f).empty()) return false;
  return true;
}

ShardSet open_shard_set(const std::string& path, const std::string& split) {
  CHECK(split == "train" || split == "test" || split == "all", "shards: unknown split '", split, "'");
  std::error_code ec;
  const fs::path p(path);
  ShardSet set;
  set.name = path;
  std::vector<std::string> files;
  if (path.find('{') == std::string::npos && fs::is_directory(p, ec)) {
    if (fs::is_regular_file(p / kShardIndexName, ec)) {
      const nlohmann::json j = read_index(p / kShardIndexName);
      for (const auto& [name, list] : j["splits"].items()) {
        if (split != "all" && name != split) continue;
        for (const auto& f : list) files.push_back((p / f.at("file").get<std::string>()).string());
      }
    } else {
      const bool one = shards_hold_one_split(path);
      for (const std::string& f : tar_files_in(p))
        if (one ? split != "test" : split == "all" || split_of_name(f) == split) files.push_back(f);
    }
    CHECK(!files.empty(), path, ": no ", split == "all" ? "" : split + " ", "shards (.tar files",
          split == "all" ? "" : " named " + split + "*", ")");
  } else {
    if (path.find('{') != std::string::npos)
      files = expand_braces(path);
    else if (lower(p.filename().string()).ends_with(".txt"))
      files = read_list(path);
    else
      files = {path};
    CHECK(split != "test", path, ": no test shards (a shard pattern, list or file is one split)");
    CHECK(!files.empty(), path, ": the shard list names no shards");
  }
  for (const std::string& f : files) CHECK(fs::is_regular_file(f, ec), f, ": no such shard");

  // Counts and classes from the index beside the first shard, when it lists every file.
  std::map<std::string, uint64_t> counts;
  std::vector<std::string> classes;
  const fs::path index = fs::path(files[0]).parent_path() / kShardIndexName;
  if (fs::is_regular_file(index, ec)) {
    const nlohmann::json j = read_index(index);
    for (const auto& [name, list] : j["splits"].items())
      for (const auto& f : list)
        counts[(index.parent_path() / f.at("file").get<std::string>()).lexically_normal().string()] =
            f.at("samples").get<uint64_t>();
    classes = j["classes"].get<std::vector<std::string>>();
  }
  bool indexed = !classes.empty();
  for (const std::string& f : files) indexed = indexed && counts.count(fs::path(f).lexically_normal().string());
  int32_t max_label = -1;
  uint64_t id = 0;
  for (const std::string& f : files) {
    uint64_t n = 0;
    if (indexed) {
      n = counts[fs::path(f).lexically_normal().string()];
    } else {
      ShardReader r(f, 0, /*images=*/false);
      for (ShardSample s; r.next(s);) ++n, max_label = std::max(max_label, s.label);
    }
    set.shards.push_back({f, n, id});
    id += n;
  }
  if (indexed) {
    set.class_names = classes;
  } else {
    for (int32_t c = 0; c <= max_label; ++c) set.class_names.push_back(std::to_string(c));
  }
  CHECK(set.size() > 0, path, ": the shards hold no samples");
  return set;
}

// ---- reading ------------------------------------------------------------------------------------

ShardReader::ShardReader(std::string path, int classes, bool images)
    : path_(std::move(path)), classes_(classes), images_(images) {
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  CHECK(fd_ >= 0, path_, ": cannot open the shard");
  ::posix_fadvise(fd_, 0, 0, POSIX_FADV_SEQUENTIAL);  // larger kernel readahead
  struct stat st {};
  file_bytes_ = ::fstat(fd_, &st) == 0 ? int64_t(st.st_size) : 0;
  a_ = archive_read_new();
  archive_read_support_format_tar(a_);
  if (archive_read_open_fd(a_, fd_, kReadBlock) != ARCHIVE_OK) {
    const char* why = archive_error_string(a_);
    const std::string what = why ? why : "unknown error";
    archive_read_free(a_);  // no destructor runs for a constructor that throws
    ::close(fd_);
    FAIL(path_, ": cannot read it as tar (", what, ")");
  }
}

ShardReader::~ShardReader() {
  if (a_) archive_read_free(a_);
  if (fd_ >= 0) ::close(fd_);
}

void ShardReader::fail(const std::string& what) const {
  const char* why = a_ ? archive_error_string(a_) : nullptr;
  FAIL(path_, ": ", what, why ? std::string(" (") + why + ")" : std::string());
}

bool ShardReader::next_member() {
  while (!eof_) {
    archive_entry* e = nullptr;
    const int rc = archive_read_next_header(a_, &e);
    if (rc == ARCHIVE_EOF) break;
    if (rc < ARCHIVE_WARN) fail("damaged or truncated tar");
    if (archive_entry_filetype(e) != AE_IFREG) continue;  // folders, links
    name_ = archive_entry_pathname(e) ? archive_entry_pathname(e) : "";
    if (name_.starts_with("./")) name_.erase(0, 2);
    std::string key, ext;
    if (!split_member(name_, key, ext)) FAIL(path_, ": member '", name_, "' is not named KEY.EXT");
    data_.clear();
    if (ext != "cls" && !(images_ && is_image_ext(ext))) return true;  // skipped by the next header
    const la_int64_t size = archive_entry_size(e);
    // A header's size beyond the file is a damaged tar, not a reason to allocate it.
    if (size < 0 || size > file_bytes_) fail("member '" + name_ + "' is larger than the shard");
    data_.resize(size_t(size));
    size_t got = 0;
    while (got < data_.size()) {
      const la_ssize_t n = archive_read_data(a_, data_.data() + got, data_.size() - got);
      if (n < 0) fail("damaged or truncated tar in member '" + name_ + "'");
      if (n == 0) fail("member '" + name_ + "' ends early (truncated tar)");
      got += size_t(n);
    }
    return true;
  }
  eof_ = true;
  return false;
}

bool ShardReader::next(ShardSample& s) {
  if (!pending_ && !next_member()) return false;
  pending_ = false;
  std::string key, ext;
  split_member(name_, s.key, ext);
  s.image.clear();
  s.image_ext.clear();
  s.label = -1;
  bool has_cls = false;
  std::string unsupported;
  while (true) {
    if (ext == "cls") {
      const std::string text = trim(std::string(data_.begin(), data_.end()));
      int64_t v = -1;
      const auto [end, err] = std::from_chars(text.data(), text.data() + text.size(), v);
      CHECK(err == std::errc() && end == text.data() + text.size() && v >= 0 && v <= INT32_MAX &&
                (classes_ <= 0 || v < classes_),
            path_, ": sample ", s.key, ": label '", text.substr(0, 40), "' is not a class number",
            classes_ > 0 ? detail::concat(" in [0, ", classes_, ")") : std::string(" >= 0"));
      s.label = int32_t(v);
      has_cls = true;
    } else if (is_image_ext(ext)) {
      CHECK(s.image_ext.empty(), path_, ": sample ", s.key, " has two images (.", s.image_ext, " and .", ext, ")");
      s.image_ext = ext;
      s.image = std::move(data_);
    } else if (ext == "webp" || ext == "ppm" || ext == "jpe" || ext == "tif" || ext == "tiff") {
      unsupported = ext;
    }
    if (!next_member()) break;
    split_member(name_, key, ext);
    if (key != s.key) {
      pending_ = true;
      break;
    }
  }
  CHECK(!s.image_ext.empty(), path_, ": sample ", s.key, " has no image (.jpg, .jpeg, .png or .bmp)",
        unsupported.empty() ? "" : "; ." + unsupported + " is not read");
  CHECK(has_cls, path_, ": sample ", s.key, " has no .cls member (its label)");
  return true;
}

// ---- writing ------------------------------------------------------------------------------------

namespace {
la_ssize_t write_to(archive*, void* file, const void* data, size_t n) {
  static_cast<AtomicFile*>(file)->write(data, n);
  return la_ssize_t(n);
}
}  // namespace

ShardWriter::ShardWriter(std::string path) : path_(std::move(path)), file_(std::make_unique<AtomicFile>(path_)) {
  a_ = archive_write_new();
  archive_write_set_format_pax_restricted(a_);  // ustar unless a name needs more
  if (archive_write_open(a_, file_.get(), nullptr, write_to, nullptr) != ARCHIVE_OK) {
    const char* why = archive_error_string(a_);
    const std::string what = why ? why : "unknown error";
    archive_write_free(a_);  // no destructor runs for a constructor that throws
    FAIL(path_, ": cannot write a tar (", what, ")");
  }
}

ShardWriter::~ShardWriter() {
  if (a_) archive_write_free(a_);  // an unclosed writer's temporary is removed by file_
}

void ShardWriter::member(const std::string& name, const void* data, size_t size) {
  archive_entry* e = archive_entry_new();
  archive_entry_set_pathname(e, name.c_str());
  archive_entry_set_size(e, la_int64_t(size));
  archive_entry_set_filetype(e, AE_IFREG);
  archive_entry_set_perm(e, 0644);
  archive_entry_set_mtime(e, 0, 0);  // the same bytes for the same samples
  const bool ok = archive_write_header(a_, e) == ARCHIVE_OK &&
                  (size == 0 || archive_write_data(a_, data, size) == la_ssize_t(size));
  archive_entry_free(e);
  if (!ok) FAIL(path_, ": writing member ", name, " failed (", archive_error_string(a_), ")");
  bytes_ += 512 + (size + 511) / 512 * 512;
}

void ShardWriter::add(const std::string& key, const std::string& image_ext, const std::vector<uint8_t>& image,
                      int label) {
  std::string k, e;
  CHECK(split_member(key + ".x", k, e) && k == key, path_, ": key '", key, "' may not contain a dot");
  CHECK(is_image_ext(image_ext), path_, ": ", key, ": .", image_ext, " is not an image extension shards carry");
  member(key + "." + image_ext, image.data(), image.size());
  const std::string cls = std::to_string(label);
  member(key + ".cls", cls.data(), cls.size());
  ++samples_;
}

void ShardWriter::close() {
  CHECK(a_, path_, ": closed twice");
  const int rc = archive_write_close(a_);
  archive_write_free(a_);
  a_ = nullptr;
  CHECK(rc == ARCHIVE_OK, path_, ": finishing the tar failed");
  file_->commit();
}

}  // namespace mpicnn::data
