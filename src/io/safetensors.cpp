// safetensors dtypes and reader (the writer is in safetensors_writer.cpp). Validation follows the reference implementation (header
// limit, offsets tiling the buffer exactly) and is stricter where it is silent (duplicate
// keys, unknown entry keys). Assumes a little-endian host, like every target we build for.
#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <limits>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "core/half.h"
#include "io/safetensors_detail.h"

static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes little-endian");

namespace mpicnn {

// The reader parses into std::map-backed json: ordered_json's vector storage copies values
// (recursively) when it grows, which a hostile deeply nested header turns into a stack
// overflow. Header order is recorded by the parser callback instead.
using Json = nlohmann::json;

namespace safetensors_detail {

// Position of the first byte that breaks UTF-8 (overlong forms, surrogates and code points
// past U+10FFFF included), or npos.
size_t invalid_utf8_at(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = uint8_t(s[i]);
    size_t len;
    uint32_t cp;
    if (c < 0x80) { ++i; continue; }
    if (c >= 0xC2 && c <= 0xDF) len = 2, cp = c & 0x1Fu;
    else if (c >= 0xE0 && c <= 0xEF) len = 3, cp = c & 0x0Fu;
    else if (c >= 0xF0 && c <= 0xF4) len = 4, cp = c & 0x07u;
    else return i;
    if (s.size() - i < len) return i;
    for (size_t k = 1; k < len; ++k) {
      const auto cc = uint8_t(s[i + k]);
      if ((cc & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (cc & 0x3Fu);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF))
      return i;
    i += len;
  }
  return std::string_view::npos;
}

// Product of the extents, or nullopt when it (or its byte size) leaves int64.
std::optional<int64_t> checked_nbytes(const Dims& shape, size_t elem_size) {
  int64_t n = int64_t(elem_size);
  for (int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return std::nullopt;
  return n;
}

}  // namespace safetensors_detail

using safetensors_detail::checked_nbytes;
using safetensors_detail::invalid_utf8_at;

namespace {

struct DTypeInfo {
  DType type;
  const char* name;
  size_t size;
};
constexpr DTypeInfo kDTypes[] = {
    {DType::F64, "F64", 8}, {DType::F32, "F32", 4}, {DType::F16, "F16", 2},
    {DType::BF16, "BF16", 2}, {DType::I64, "I64", 8}, {DType::I32, "I32", 4},
    {DType::I16, "I16", 2}, {DType::I8, "I8", 1}, {DType::U64, "U64", 8},
    {DType::U32, "U32", 4}, {DType::U16, "U16", 2}, {DType::U8, "U8", 1},
    {DType::BOOL, "BOOL", 1}};

// The reference implementation's limit: a header this large is an attack or an accident.
constexpr uint64_t kMaxHeaderBytes = 100ull * 1000 * 1000;


std::vector<uint8_t> read_whole_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  CHECK(fd >= 0, path, ": cannot open: ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    FAIL(path, ": not a regular file");
  }
  std::vector<uint8_t> buf(size_t(st.st_size));
  size_t got = 0;
  while (got < buf.size()) {
    const ssize_t n = ::read(fd, buf.data() + got, buf.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : 0;
      ::close(fd);
      FAIL(path, ": cannot read: ", err ? std::strerror(err) : "file shrank while reading");
    }
    got += size_t(n);
  }
  ::close(fd);
  return buf;
}

// The value of a JSON non-negative integer, or nullopt for anything else (floats included).
std::optional<int64_t> as_index(const Json& j) {
  if (!j.is_number_unsigned()) return std::nullopt;
  const auto v = j.get<uint64_t>();
  if (v > uint64_t(std::numeric_limits<int64_t>::max())) return std::nullopt;
  return int64_t(v);
}

// out[i] = element i of a packed little-endian array of T (memcpy: possibly unaligned).
template <typename T>
void widen(std::vector<int64_t>& out, const uint8_t* src) {
  for (size_t i = 0; i < out.size(); ++i) {
    T x;
    std::memcpy(&x, src + i * sizeof(T), sizeof(T));
    out[i] = int64_t(x);
  }
}

// A JSON value for an error message: scalars verbatim, containers by kind only (dumping a
// hostile, deeply nested value would recurse without bound).
std::string describe(const Json& j) {
  if (j.is_array()) return "a list";
  if (j.is_object()) return "an object";
  std::string d = j.dump();
  if (d.size() > 60) d = d.substr(0, 57) + "...";
  return j.is_string() ? "the string " + d : d;
}

// The header text as JSON, after checks the JSON library does not make: UTF-8 first (for a
// clear message), an object, bounded nesting, and no duplicate keys (nlohmann silently keeps
// the last one; the parser callback sees every key, so a key set per open object catches
// them). `order` receives the top-level keys in file order.
Json parse_header(std::vector<std::string>& order, const std::string& f, std::string_view text) {
  const size_t bad = invalid_utf8_at(text);
  CHECK(bad == std::string_view::npos, f, ": header is not valid UTF-8 (byte ", bad,
        " of the header)");
  CHECK(!text.empty() && text[0] == '{', f, ": header is not a JSON object (must start with '{')");
  // JSON text holds no raw NUL; nlohmann would take one as the end of the input and ignore the
  // rest (a damaged padding byte would pass unnoticed).
  const size_t nul = text.find('\0');
  CHECK(nul == std::string_view::npos, f, ": header is not valid JSON: NUL byte at byte ", nul,
        " of the header");
  // A valid header nests three deep (header, entry, shape). Deeper input is refused while
  // parsing: a 100 MB header of nested brackets would otherwise cost gigabytes of DOM.
  constexpr int kMaxDepth = 8;
  int depth = 0;
  std::vector<std::unordered_set<std::string>> open;
  std::string top_key, duplicate;
  auto callback = [&](int, Json::parse_event_t ev, Json& parsed) {
    switch (ev) {
      case Json::parse_event_t::object_start:
        open.emplace_back();
        [[fallthrough]];
      case Json::parse_event_t::array_start:
        CHECK(++depth <= kMaxDepth, f, ": header is nested more than ", kMaxDepth,
              " levels deep (not a safetensors header)");
        break;
      case Json::parse_event_t::object_end:
        open.pop_back();
        [[fallthrough]];
      case Json::parse_event_t::array_end:
        --depth;
        break;
      case Json::parse_event_t::key: {
        const auto& key = parsed.get_ref<const std::string&>();
        if (open.size() == 1) top_key = key, order.push_back(key);
        if (!open.back().insert(key).second && duplicate.empty())
          duplicate = open.size() == 1 ? (key == "__metadata__" ? "duplicate \"__metadata__\""
                                                                 : "duplicate tensor name '" + key + "'")
                                       : "duplicate key '" + key + "' in entry '" + top_key + "'";
        break;
      }
      default:
        break;
    }
    return true;
  };
  Json header;
  try {
    header = Json::parse(text.begin(), text.end(), callback);
  } catch (const Json::exception& e) {
    std::string what = e.what();
    const size_t cut = what.find("] ");  // drop nlohmann's "[json.exception.parse_error.101] "
    FAIL(f, ": header is not valid JSON: ", cut == std::string::npos ? what : what.substr(cut + 2));
  }
  CHECK(duplicate.empty(), f, ": ", duplicate, " in the header");
  CHECK(header.is_object(), f, ": header is not a JSON object");
  return header;
}

// One tensor entry, checked on its own: exact keys, known dtype, shape, offsets inside the
// data buffer and spanning exactly the bytes the dtype and shape need.
TensorInfo parse_entry(const std::string& where, const std::string& name, const Json& value,
                       int64_t data_size) {
  CHECK(value.is_object(), where, ": entry must be an object, found ", describe(value));
  for (const auto& item : value.items())
    CHECK(item.key() == "dtype" || item.key() == "shape" || item.key() == "data_offsets", where,
          ": unknown key '", item.key(), "' (expected dtype, shape, data_offsets)");
  for (const char* k : {"dtype", "shape", "data_offsets"})
    CHECK(value.contains(k), where, ": missing \"", k, "\"");

  TensorInfo t;
  t.name = name;
  const Json& jd = value["dtype"];
  CHECK(jd.is_string(), where, ": dtype must be a string, found ", describe(jd));
  const auto dt = dtype_from_name(jd.get<std::string>());
  CHECK(dt.has_value(), where, ": unknown dtype '", jd.get<std::string>(), "'");
  t.dtype = *dt;

  const Json& js = value["shape"];
  CHECK(js.is_array(), where, ": shape must be a list of non-negative integers, found ",
        describe(js));
  for (const Json& e : js) {
    const auto d = as_index(e);
    CHECK(d.has_value(), where, ": shape must be a list of non-negative integers, found ",
          describe(e));
    t.shape.push_back(*d);
  }
  const auto need = checked_nbytes(t.shape, dtype_size(t.dtype));
  CHECK(need.has_value(), where, ": shape ", dims_str(t.shape), " has too many elements");

  const Json& jo = value["data_offsets"];
  const bool pair = jo.is_array() && jo.size() == 2;
  const auto b = pair ? as_index(jo[0]) : std::nullopt, e = pair ? as_index(jo[1]) : std::nullopt;
  CHECK(b && e, where, ": data_offsets must be two non-negative integers [begin, end]");
  t.begin = *b, t.end = *e;
  CHECK(t.begin <= t.end, where, ": data_offsets [", t.begin, ", ", t.end, "] have begin > end");
  CHECK(t.end <= data_size, where, ": data_offsets [", t.begin, ", ", t.end,
        "] run past the end of the file (data buffer is ", data_size,
        " bytes): the file is truncated or corrupt");
  CHECK(t.nbytes() == *need, where, ": data_offsets [", t.begin, ", ", t.end, "] span ",
        t.nbytes(), " bytes, but dtype ", dtype_name(t.dtype), " and shape ", dims_str(t.shape),
        " need ", *need);
  return t;
}

// The tensors must tile the data buffer exactly: in offset order each begins where the
// previous ended, and the last ends at the end of the file. Header order may differ.
void check_tiling(const std::string& f, const std::vector<TensorInfo>& tensors, int64_t data_size) {
  std::vector<size_t> order(tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const auto &x = tensors[a], &y = tensors[b];
    return x.begin != y.begin ? x.begin < y.begin : x.end < y.end;
  });
  int64_t cursor = 0;
  const TensorInfo* prev = nullptr;
  for (size_t i : order) {
    const TensorInfo& t = tensors[i];
    CHECK(t.begin >= cursor, f, ": tensor '", t.name, "' (bytes [", t.begin, ", ", t.end,
          ")) overlaps tensor '", prev ? prev->name : "", "' (bytes [", prev ? prev->begin : 0,
          ", ", cursor, "))");
    CHECK(t.begin == cursor, f, ": hole in the data buffer: bytes [", cursor, ", ", t.begin,
          ") before tensor '", t.name, "' belong to no tensor");
    cursor = t.end;
    prev = &t;
  }
  CHECK(cursor == data_size, f, ": ", data_size - cursor,
        " trailing bytes after the last tensor's data (the data buffer must be covered exactly)");
}

}  // namespace

const char* dtype_name(DType t) { return kDTypes[size_t(t)].name; }
size_t dtype_size(DType t) { return kDTypes[size_t(t)].size; }
bool dtype_is_float(DType t) {
  return t == DType::F64 || t == DType::F32 || t == DType::F16 || t == DType::BF16;
}
bool dtype_is_int(DType t) { return !dtype_is_float(t) && t != DType::BOOL; }
std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& d : kDTypes)
    if (name == d.name) return d.type;
  return std::nullopt;
}

Dims dims_of(const Shape& s) { return Dims(s.d, s.d + s.ndim); }

std::string dims_str(const Dims& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

int64_t dims_numel(const Dims& d) {
  int64_t n = 1;
  for (int64_t v : d) n *= v;
  return n;
}

// ---------------------------------------------------------------------------------------
// Reader

SafetensorsReader::SafetensorsReader(const std::string& path) : path_(path) {
  file_ = read_whole_file(path_);
  parse();
}

SafetensorsReader SafetensorsReader::from_bytes(std::vector<uint8_t> bytes, std::string label) {
  SafetensorsReader r;
  r.path_ = std::move(label);
  r.file_ = std::move(bytes);
  r.parse();
  return r;
}

void SafetensorsReader::parse() {
  const std::string& f = path_;
  CHECK(file_.size() >= 8, f, ": file is too short (", file_.size(),
        " bytes) to be safetensors: no 8-byte header length");
  uint64_t n = 0;
  std::memcpy(&n, file_.data(), 8);
  CHECK(n <= kMaxHeaderBytes, f, ": header length ", n, " exceeds the limit of ",
        kMaxHeaderBytes, " bytes (not a safetensors file?)");
  CHECK(n <= file_.size() - 8, f, ": header length ", n, " runs past the end of the file (",
        file_.size(), " bytes): the file is truncated or corrupt");
  data_start_ = 8 + size_t(n);
  const int64_t data_size = int64_t(file_.size() - data_start_);
  std::vector<std::string> order;
  std::map<std::string, std::string> crcs;  // the CRC-32 entries of __metadata__
  const Json header = parse_header(
      order, f, std::string_view(reinterpret_cast<const char*>(file_.data()) + 8, size_t(n)));

  for (const std::string& key : order) {
    const Json& value = header[key];
    if (key == "__metadata__") {
      CHECK(value.is_object(), f, ": __metadata__ must be an object of strings, found ",
            describe(value));
      for (const auto& [mk, mv] : value.items()) {
        CHECK(mv.is_string(), f, ": __metadata__ must map strings to strings, but '", mk,
              "' is ", describe(mv));
        (is_crc_key(mk) ? crcs : metadata_)[mk] = mv.get<std::string>();
      }
      continue;
    }
    index_.emplace(key, tensors_.size());
    tensors_.push_back(parse_entry(f + ": tensor '" + key + "'", key, value, data_size));
  }
  check_tiling(f, tensors_, data_size);
  if (!crcs.empty()) verify_checksums(crcs);  // safetensors_crc.cpp
}


const std::string& SafetensorsReader::metadata(const std::string& key) const {
  const auto it = metadata_.find(key);
  CHECK(it != metadata_.end(), path_, ": no metadata entry '", key, "'");
  return it->second;
}

const TensorInfo& SafetensorsReader::info(const std::string& name) const {
  const auto it = index_.find(name);
  CHECK(it != index_.end(), path_, ": no tensor named '", name, "'");
  return tensors_[it->second];
}

std::span<const uint8_t> SafetensorsReader::bytes(const std::string& name) const {
  const TensorInfo& t = info(name);
  return {data(t), size_t(t.nbytes())};
}

template <class T>
void SafetensorsReader::read_floats(T* out, const std::string& name, const Dims& want) const {
  const TensorInfo& t = info(name);
  CHECK(dtype_is_float(t.dtype), path_, ": tensor '", name, "' has dtype ", dtype_name(t.dtype),
        ", expected a float dtype (F32, F16, BF16 or F64)");
  CHECK(t.shape == want, path_, ": tensor '", name, "' has shape ", dims_str(t.shape),
        ", expected ", dims_str(want));
  const uint8_t* src = data(t);
  const int64_t n = t.numel();
  // memcpy per element: offsets in a foreign file need not be aligned for the dtype.
  switch (t.dtype) {
    case DType::F32:
      if constexpr (std::is_same_v<T, float>) {
        if (n > 0) std::memcpy(out, src, size_t(n) * 4);
      } else {
        for (int64_t i = 0; i < n; ++i) {
          float v;
          std::memcpy(&v, src + 4 * i, 4);
          out[i] = v;
        }
      }
      break;
    case DType::F16:
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        out[i] = t.dtype == DType::F16 ? half_to_float(h) : bf16_to_float(h);
      }
      break;
    case DType::F64:
      for (int64_t i = 0; i < n; ++i) {
        double v;
        std::memcpy(&v, src + 8 * i, 8);
        // Values from the largest float up to the rounding midpoint round down to it; past
        // that a finite double would become infinity, which the caller did not store.
        if constexpr (std::is_same_v<T, float>)
          CHECK(!(std::fabs(v) >= 0x1.ffffffp+127), path_, ": tensor '", name, "' element ", i,
                " (", v, ") is beyond float32 range");
        out[i] = T(v);
      }
      break;
    default:
      break;
  }
}
template void SafetensorsReader::read_floats(float*, const std::string&, const Dims&) const;
template void SafetensorsReader::read_floats(double*, const std::string&, const Dims&) const;

void SafetensorsReader::read(Tensor& out, const std::string& name) const {
  CHECK(out.defined() && out.device() == Device::CPU, path_, ": reading tensor '", name,
        "' needs a defined CPU tensor to read into");
  read_floats(out.data(), name, dims_of(out.shape()));
}

std::vector<float> SafetensorsReader::read_f32(const std::string& name) const {
  const TensorInfo& t = info(name);
  std::vector<float> v(size_t(t.numel()));
  read_floats(v.data(), name, t.shape);
  return v;
}

std::vector<double> SafetensorsReader::read_f64(const std::string& name) const {
  const TensorInfo& t = info(name);
  std::vector<double> v(size_t(t.numel()));
  read_floats(v.data(), name, t.shape);
  return v;
}

std::vector<int64_t> SafetensorsReader::read_i64(const std::string& name) const {
  const TensorInfo& t = info(name);
  CHECK(dtype_is_int(t.dtype), path_, ": tensor '", name, "' has dtype ", dtype_name(t.dtype),
        ", expected an integer dtype");
  std::vector<int64_t> v(size_t(t.numel()));
  const uint8_t* src = data(t);
  switch (t.dtype) {
    case DType::I64: widen<int64_t>(v, src); break;
    case DType::I32: widen<int32_t>(v, src); break;
    case DType::I16: widen<int16_t>(v, src); break;
    case DType::I8: widen<int8_t>(v, src); break;
    case DType::U32: widen<uint32_t>(v, src); break;
    case DType::U16: widen<uint16_t>(v, src); break;
    case DType::U8: widen<uint8_t>(v, src); break;
    default:  // U64: the only one that can leave int64's range
      widen<uint64_t>(v, src);
      for (size_t i = 0; i < v.size(); ++i)
        CHECK(v[i] >= 0, path_, ": tensor '", name, "' element ", i, " (", uint64_t(v[i]),
              ") does not fit in int64");
  }
  return v;
}

int64_t SafetensorsReader::read_i64_scalar(const std::string& name) const {
  const TensorInfo& t = info(name);
  CHECK(t.shape.empty(), path_, ": tensor '", name, "' has shape ", dims_str(t.shape),
        ", expected a scalar []");
  return read_i64(name)[0];
}

}  // namespace mpicnn
