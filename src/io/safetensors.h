// safetensors files (the format of huggingface/safetensors): an 8-byte little-endian header
// length, a JSON header naming each tensor's dtype, shape and byte range, then the packed
// little-endian data. The reader validates the whole file up front and converts float dtypes
// to float32 or float64 on request; the writer packs tensors in insertion order and writes atomically.
// Not a checkpoint policy (which tensors, what metadata): io/checkpoint builds on this.
//
// Integrity (our addition, inside the format): the writer records in __metadata__ each tensor's
// CRC-32 (zlib's, as Python's zlib.crc32 computes it, over the tensor's data bytes; 8 lowercase
// hex digits) under "crc32:<tensor name>", and under "crc32-header" one CRC-32 over every
// tensor's name, dtype and shape and every other metadata entry (sorted, so a tool that re-saves
// the file in another order keeps it valid). The reader verifies them all before anything is
// exposed, so a truncated or bit-flipped file is refused naming the file and the tensor. Files
// without these keys (torch / torchvision exports) load as before; they stay valid safetensors
// for every other reader, which sees string metadata.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/tensor.h"

namespace mpicnn {

// The format's dtype names; values are stored little-endian.
enum class DType : uint8_t { F64, F32, F16, BF16, I64, I32, I16, I8, U64, U32, U16, U8, BOOL };

// The dtype of `real` (core/real.h): F32, or F64 in the f64 test build.
inline constexpr DType kRealDType = sizeof(real) == 8 ? DType::F64 : DType::F32;

const char* dtype_name(DType t);  // "F32", "BF16", ...
size_t dtype_size(DType t);       // bytes per element
bool dtype_is_float(DType t);     // F64, F32, F16, BF16
bool dtype_is_int(DType t);       // I64 .. U8 (not BOOL)
std::optional<DType> dtype_from_name(std::string_view name);

// The metadata keys of the CRC-32s (see the top of this file); set_metadata refuses them.
inline constexpr std::string_view kCrcKeyPrefix = "crc32:";
inline constexpr std::string_view kHeaderCrcKey = "crc32-header";
bool is_crc_key(std::string_view metadata_key);
// zlib's CRC-32 of `bytes`, continuing `crc` (0 to start).
uint32_t crc32_of(std::span<const uint8_t> bytes, uint32_t crc = 0);
std::string crc32_hex(uint32_t crc);  // 8 lowercase hex digits

// A written file's size and CRC-32 (of all of its bytes).
struct FileDigest {
  uint64_t bytes = 0;
  uint32_t crc32 = 0;
};

// A stored shape: any rank, [] is a scalar (one element). Engine Shapes convert with dims_of.
using Dims = std::vector<int64_t>;
Dims dims_of(const Shape& s);
std::string dims_str(const Dims& d);  // "[2, 3]"
int64_t dims_numel(const Dims& d);    // 1 for []

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  Dims shape;
  int64_t begin = 0, end = 0;  // byte range [begin, end) within the data buffer
  int64_t numel() const { return dims_numel(shape); }
  int64_t nbytes() const { return end - begin; }
};

// Reads a whole file into memory and validates it before anything is exposed: a reader that
// constructs is a well-formed file whose tensors exactly tile the data buffer. Every error
// is an mpicnn::Error whose message names the file (and the tensor when there is one).
class SafetensorsReader {
 public:
  explicit SafetensorsReader(const std::string& path);
  // The same validation on bytes already in memory; `label` stands for the path in errors.
  static SafetensorsReader from_bytes(std::vector<uint8_t> bytes, std::string label);

  const std::string& path() const { return path_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }  // header order
  // The metadata, without the CRC-32 entries (checksummed() says whether there were any).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool checksummed() const { return checksummed_; }
  // The whole file's size and CRC-32 (from the per-tensor CRCs when checksummed, else one pass).
  FileDigest digest() const;
  // The metadata value for key; an error naming the file and key when it is absent.
  const std::string& metadata(const std::string& key) const;

  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  const TensorInfo& info(const std::string& name) const;  // error if absent
  std::span<const uint8_t> bytes(const std::string& name) const;

  // Float tensors (F32, F16, BF16, F64) converted to T, float or double. The stored shape
  // must equal `want` (or, for the Tensor form, the tensor's shape); into float, F64 values
  // beyond float range are an error rather than a silent infinity.
  template <class T>
  void read_floats(T* out, const std::string& name, const Dims& want) const;  // (numel)
  void read_f32(float* out, const std::string& name, const Dims& want) const {
    read_floats(out, name, want);
  }
  void read(Tensor& out, const std::string& name) const;       // as `real`, (out's shape)
  std::vector<float> read_f32(const std::string& name) const;   // any shape
  std::vector<double> read_f64(const std::string& name) const;  // any shape

  // Integer tensors (any signed or unsigned integer dtype) widened to int64.
  std::vector<int64_t> read_i64(const std::string& name) const;
  int64_t read_i64_scalar(const std::string& name) const;  // shape must be []

 private:
  SafetensorsReader() = default;
  void parse();
  void verify_checksums(const std::map<std::string, std::string>& crcs);
  const uint8_t* data(const TensorInfo& t) const { return file_.data() + data_start_ + t.begin; }

  std::string path_;
  std::vector<uint8_t> file_;
  size_t data_start_ = 0;
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
  bool checksummed_ = false;
  std::optional<uint32_t> file_crc_;  // set while verifying the CRCs
};

// Collects tensors (copying their bytes) and writes them as one file. The header lists them
// in insertion order, metadata first; data is packed in the same order with no gaps; the
// header is padded with spaces so the data starts on an 8-byte boundary. Every file carries
// the CRC-32 entries described at the top of this file.
class SafetensorsWriter {
 public:
  void add(const std::string& name, DType dtype, const Dims& shape, std::span<const uint8_t> bytes);
  // Float or double values stored as `as` (F32, F16, BF16 or F64; narrower forms round to
  // nearest even). data: (numel of shape).
  template <class T>
  void add_floats(const std::string& name, const T* data, const Dims& shape, DType as);
  void add_f32(const std::string& name, const float* data, const Dims& shape,
               DType as = DType::F32) {
    add_floats(name, data, shape, as);
  }
  // A CPU tensor's `real` values, stored as `as` (by default as their own dtype, kRealDType).
  void add(const std::string& name, const Tensor& t, DType as = kRealDType);
  void add_i64(const std::string& name, const int64_t* data, const Dims& shape);
  void add_i64_scalar(const std::string& name, int64_t value);  // shape []
  // Replaces; the CRC-32 keys are reserved (the writer computes them).
  void set_metadata(const std::string& key, const std::string& value);

  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  size_t size() const { return entries_.size(); }

  std::vector<uint8_t> header() const;    // length prefix + padded JSON
  std::vector<uint8_t> to_bytes() const;  // the whole file
  // Atomic (see io/atomic_file.h). Returns the file's size and CRC-32, computed from the bytes
  // written (no second pass). Errors name `path` and the cause (e.g. no space left on device).
  FileDigest write(const std::string& path) const;

 private:
  struct Entry {
    std::string name;
    DType dtype;
    Dims shape;
    std::vector<uint8_t> data;
  };
  Entry& new_entry(const std::string& name, DType dtype, const Dims& shape);
  std::vector<uint8_t> header(std::vector<uint32_t>& crcs) const;
  std::vector<Entry> entries_;
  std::unordered_map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace mpicnn
