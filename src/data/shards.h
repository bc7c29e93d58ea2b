// Tar shards in the WebDataset layout: a sample is the consecutive members of one key
// (`KEY.jpg` or `.png` with `KEY.cls`, the label as decimal text; other members are ignored),
// shards of a few hundred MB read sequentially with libarchive. This file: naming a shard set
// (brace patterns, a folder, a list file), its index (`shards.json`: files, sample counts,
// classes; counted by a scan when absent), the one-shard reader and writer. The per-epoch
// stream over a rank's shards is shard_stream.h; packing a dataset is tools.h's pack_shards.
// Not a random-access Dataset: ./train reads shards as a stream.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

struct archive;

namespace mpicnn {
class AtomicFile;
}

namespace mpicnn::data {

inline constexpr const char* kShardIndexName = "shards.json";

struct ShardFile {
  std::string path;
  uint64_t samples = 0;
  uint64_t first_id = 0;  // the set's samples before it: sample j of this shard has id first_id + j
};

// One split of a shard set, as every rank needs it.
struct ShardSet {
  std::string name;                      // what -d named: "data/in1k/train-{000000..000146}.tar"
  std::vector<ShardFile> shards;
  std::vector<std::string> class_names;
  uint64_t size() const { return shards.empty() ? 0 : shards.back().first_id + shards.back().samples; }
  std::string describe() const;          // "NAME: 12 tar shards, 30000 samples, 10 classes"
};
nlohmann::json to_json(const ShardSet& s);
ShardSet shard_set_from_json(const nlohmann::json& j);

// "a-{000..012}.tar" -> a-000.tar ... a-012.tar (width of the first bound when it has a leading
// zero), "{a,b}" lists, several groups multiply out; text without braces is itself. An Error
// names the pattern when a range is malformed or descending.
std::vector<std::string> expand_braces(const std::string& pattern);

// Whether `path` names tar shards: a brace pattern, a .tar file, a folder holding .tar files
// and no class subfolders, or a .txt list whose first entry is a .tar path.
bool is_shard_path(const std::string& path);
// Whether the shards at `path` are one split only (a pattern, a list, one file, or a folder
// without train/test shards): the whole of them is the data, "all".
bool shards_hold_one_split(const std::string& path);

// Opens split `split` ("train", "test" or "all") of the shards at `path`: every file must
// exist; sample counts and class names come from the shards.json beside the first shard when
// it lists every file, else from a scan of the shards (labels 0..C-1 named "0".."C-1").
// In a folder: the index's split, or the files named train* / test* (or val*).
ShardSet open_shard_set(const std::string& path, const std::string& split);

// One sample as its shard holds it.
struct ShardSample {
  std::string key;
  std::string image_ext;  // "jpg", "png", ... (lower case, as the member names it)
  std::vector<uint8_t> image;
  int32_t label = -1;
};

// Reads the samples of one shard in order, with large sequential reads. Errors (damaged or
// truncated tar, a sample without an image or a .cls, a label that is not an integer in
// [0, classes)) name the shard and the key.
class ShardReader {
 public:
  // classes <= 0: any label >= 0 is accepted. images false: image bytes are skipped, not read
  // (a count; ShardSample::image stays empty).
  ShardReader(std::string path, int classes, bool images = true);
  ~ShardReader();
  ShardReader(const ShardReader&) = delete;
  ShardReader& operator=(const ShardReader&) = delete;

  // The next sample; false at the end of the shard.
  bool next(ShardSample& s);
  const std::string& path() const { return path_; }

 private:
  bool next_member();  // into name_ / data_ (regular files only); false at the end
  void fail(const std::string& what) const;

  std::string path_;
  int classes_;
  bool images_;
  int fd_ = -1;
  int64_t file_bytes_ = 0;
  ::archive* a_ = nullptr;
  bool pending_ = false;  // name_ (and data_) hold the next sample's first member
  bool eof_ = false;
  std::string name_;
  std::vector<uint8_t> data_;
};

// Writes one shard: a POSIX tar (ustar) that Python's tarfile and WebDataset read. The file
// appears whole at close() (written to a temporary name, renamed); an abandoned writer leaves
// nothing.
class ShardWriter {
 public:
  explicit ShardWriter(std::string path);
  ~ShardWriter();
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;
  void add(const std::string& key, const std::string& image_ext, const std::vector<uint8_t>& image, int label);
  void close();
  uint64_t bytes() const { return bytes_; }
  uint64_t samples() const { return samples_; }

 private:
  void member(const std::string& name, const void* data, size_t size);  // one tar member
  std::string path_;
  std::unique_ptr<AtomicFile> file_;
  ::archive* a_ = nullptr;
  uint64_t bytes_ = 0, samples_ = 0;
};

}  // namespace mpicnn::data
