// The CRC-32s of the safetensors files we write (see io/safetensors.h): zlib's CRC-32, the
// header's canonical digest, and the reader's verification. Not the parsing of the header.
#include <zlib.h>

#include <algorithm>
#include <cstdio>

#include "io/safetensors.h"
#include "io/safetensors_detail.h"

namespace mpicnn {

bool is_crc_key(std::string_view key) {
  return key == kHeaderCrcKey || key.substr(0, kCrcKeyPrefix.size()) == kCrcKeyPrefix;
}

uint32_t crc32_of(std::span<const uint8_t> bytes, uint32_t crc) {
  uLong c = crc;
  size_t done = 0;
  while (done < bytes.size()) {  // zlib takes uInt lengths
    const size_t n = std::min<size_t>(bytes.size() - done, size_t(1) << 30);
    c = ::crc32(c, bytes.data() + done, uInt(n));
    done += n;
  }
  return uint32_t(c);
}

std::string crc32_hex(uint32_t crc) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", crc);
  return buf;
}

namespace safetensors_detail {

std::string tensor_line(const std::string& name, DType dtype, const Dims& shape) {
  std::string line = name;
  line += '\0';
  line += dtype_name(dtype);
  line += '\0';
  line += dims_str(shape);
  line += '\n';
  return line;
}

uint32_t header_crc(std::vector<std::string> tensor_lines,
                    const std::map<std::string, std::string>& metadata) {
  // Names are unique and end at the '\0', so sorting the lines sorts by name.
  std::sort(tensor_lines.begin(), tensor_lines.end());
  uint32_t crc = 0;
  auto add = [&](const std::string& s) {
    crc = crc32_of({reinterpret_cast<const uint8_t*>(s.data()), s.size()}, crc);
  };
  for (const std::string& line : tensor_lines) add(line);
  for (const auto& [k, v] : metadata)
    if (k != kHeaderCrcKey) add(k + '\0' + v + '\n');
  return crc;
}

}  // namespace safetensors_detail

namespace {

// A stored CRC-32: exactly 8 lowercase hex digits, as written; anything else (an upper-case
// digit included: one flipped bit turns 'a' into 'A') is corruption, not a CRC.
std::optional<uint32_t> parse_crc(const std::string& hex) {
  if (hex.size() != 8) return std::nullopt;
  uint32_t v = 0;
  for (char c : hex) {
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return std::nullopt;
    v = v << 4 | uint32_t(d);
  }
  return v;
}

}  // namespace

// Every tensor against its CRC-32 (data order: a truncated or damaged region is named by the
// first tensor it hits), then the header's: one clear line naming the file and the tensor.
// While at it, combines the tensors' CRCs into the whole file's (digest()) without a second pass.
void SafetensorsReader::verify_checksums(const std::map<std::string, std::string>& crcs) {
  const std::string& f = path_;
  const std::string corrupt = ": the file is corrupt";
  checksummed_ = true;
  std::vector<const TensorInfo*> by_offset;
  for (const TensorInfo& t : tensors_) by_offset.push_back(&t);
  std::stable_sort(by_offset.begin(), by_offset.end(),
                   [](const TensorInfo* a, const TensorInfo* b) { return a->begin < b->begin; });
  uint32_t file_crc = crc32_of({file_.data(), data_start_});
  std::vector<std::string> lines;
  for (const TensorInfo* t : by_offset) {
    const auto it = crcs.find(std::string(kCrcKeyPrefix) + t->name);
    CHECK(it != crcs.end(), f, ": tensor '", t->name, "' has no CRC-32 although the file records them",
          " (its name or the metadata is damaged)", corrupt);
    const auto stored = parse_crc(it->second);
    CHECK(stored.has_value(), f, ": tensor '", t->name, "' has a malformed CRC-32 '", it->second,
          "'", corrupt);
    const uint32_t got = crc32_of({data(*t), size_t(t->nbytes())});
    CHECK(got == *stored, f, ": tensor '", t->name, "' fails its CRC32 check (stored ",
          crc32_hex(*stored), ", computed ", crc32_hex(got), ")", corrupt);
    file_crc = uint32_t(::crc32_combine(file_crc, got, z_off_t(t->nbytes())));
    lines.push_back(safetensors_detail::tensor_line(t->name, t->dtype, t->shape));
  }
  for (const auto& [key, value] : crcs) {
    if (key == kHeaderCrcKey) continue;
    const std::string name = key.substr(kCrcKeyPrefix.size());
    CHECK(contains(name), f, ": __metadata__ holds a CRC-32 for tensor '", name,
          "', which the file does not hold (a name is damaged)", corrupt);
  }
  const auto h = crcs.find(std::string(kHeaderCrcKey));
  CHECK(h != crcs.end(), f, ": the header's CRC-32 ('", kHeaderCrcKey, "') is missing", corrupt);
  const auto stored = parse_crc(h->second);
  CHECK(stored.has_value(), f, ": the header's CRC-32 is malformed ('", h->second, "')", corrupt);
  std::map<std::string, std::string> all = metadata_;
  all.insert(crcs.begin(), crcs.end());
  const uint32_t got = safetensors_detail::header_crc(std::move(lines), all);
  CHECK(got == *stored, f, ": the header (tensor names, dtypes, shapes, metadata) fails its CRC32",
        " check (stored ", crc32_hex(*stored), ", computed ", crc32_hex(got), ")", corrupt);
  file_crc_ = file_crc;
}

FileDigest SafetensorsReader::digest() const {
  return {file_.size(), file_crc_ ? *file_crc_ : crc32_of(file_)};
}

}  // namespace mpicnn
