// safetensors writer: tensors in insertion order, header padded to 8 bytes, data packed with no
// holes, CRC-32s in the metadata, written atomically. Not a streaming writer: tensor bytes are
// held until write().
#include <zlib.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "core/half.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "io/safetensors_detail.h"

namespace mpicnn {

using safetensors_detail::checked_nbytes;
using safetensors_detail::invalid_utf8_at;

// ---------------------------------------------------------------------------------------
// Writer

SafetensorsWriter::Entry& SafetensorsWriter::new_entry(const std::string& name, DType dtype,
                                                       const Dims& shape) {
  CHECK(!name.empty(), "safetensors writer: empty tensor name");
  CHECK(name != "__metadata__", "safetensors writer: '__metadata__' is reserved, not a tensor name");
  CHECK(invalid_utf8_at(name) == std::string_view::npos, "safetensors writer: tensor name '",
        name, "' is not valid UTF-8");
  CHECK(!contains(name), "safetensors writer: duplicate tensor name '", name, "'");
  for (int64_t d : shape)
    CHECK(d >= 0, "safetensors writer: tensor '", name, "' has negative extent in shape ",
          dims_str(shape));
  const auto need = checked_nbytes(shape, dtype_size(dtype));
  CHECK(need.has_value(), "safetensors writer: tensor '", name, "' shape ", dims_str(shape),
        " has too many elements");
  index_.emplace(name, entries_.size());
  entries_.push_back({name, dtype, shape, std::vector<uint8_t>(size_t(*need))});
  return entries_.back();
}

void SafetensorsWriter::add(const std::string& name, DType dtype, const Dims& shape,
                            std::span<const uint8_t> bytes) {
  const auto need = checked_nbytes(shape, dtype_size(dtype));
  CHECK(!need || int64_t(bytes.size()) == *need, "safetensors writer: tensor '", name, "': ",
        bytes.size(), " bytes given, but dtype ", dtype_name(dtype), " and shape ",
        dims_str(shape), " need ", *need);
  Entry& e = new_entry(name, dtype, shape);
  if (!bytes.empty()) std::memcpy(e.data.data(), bytes.data(), bytes.size());
}

template <class T>
void SafetensorsWriter::add_floats(const std::string& name, const T* data, const Dims& shape,
                                   DType as) {
  CHECK(dtype_is_float(as), "safetensors writer: tensor '", name, "': cannot store floats as ",
        dtype_name(as));
  Entry& e = new_entry(name, as, shape);
  const int64_t n = dims_numel(shape);
  uint8_t* dst = e.data.data();
  for (int64_t i = 0; i < n; ++i) {
    switch (as) {
      case DType::F32: {
        const float v = float(data[i]);
        std::memcpy(dst + 4 * i, &v, 4);
        break;
      }
      case DType::F64: {
        const double v = data[i];
        std::memcpy(dst + 8 * i, &v, 8);
        break;
      }
      default: {
        const uint16_t h = as == DType::F16 ? float_to_half(float(data[i])) : float_to_bf16(float(data[i]));
        std::memcpy(dst + 2 * i, &h, 2);
      }
    }
  }
}
template void SafetensorsWriter::add_floats(const std::string&, const float*, const Dims&, DType);
template void SafetensorsWriter::add_floats(const std::string&, const double*, const Dims&, DType);

void SafetensorsWriter::add(const std::string& name, const Tensor& t, DType as) {
  CHECK(t.defined() && t.device() == Device::CPU, "safetensors writer: tensor '", name,
        "' must be a defined CPU tensor");
  add_floats(name, t.data(), dims_of(t.shape()), as);
}

void SafetensorsWriter::add_i64(const std::string& name, const int64_t* data, const Dims& shape) {
  Entry& e = new_entry(name, DType::I64, shape);
  if (!e.data.empty()) std::memcpy(e.data.data(), data, e.data.size());
}

void SafetensorsWriter::add_i64_scalar(const std::string& name, int64_t value) {
  add_i64(name, &value, {});
}

void SafetensorsWriter::set_metadata(const std::string& key, const std::string& value) {
  CHECK(!is_crc_key(key), "safetensors writer: metadata key '", key,
        "' is reserved for the CRC-32s the writer records");
  CHECK(invalid_utf8_at(key) == std::string_view::npos &&
            invalid_utf8_at(value) == std::string_view::npos,
        "safetensors writer: metadata '", key, "' is not valid UTF-8");
  metadata_[key] = value;
}

std::vector<uint8_t> SafetensorsWriter::header() const {
  std::vector<uint32_t> crcs;
  return header(crcs);
}

// `crcs` receives each entry's data CRC-32, in entry order (write() combines them).
std::vector<uint8_t> SafetensorsWriter::header(std::vector<uint32_t>& crcs) const {
  using OrderedJson = nlohmann::ordered_json;  // the header lists tensors in insertion order
  std::map<std::string, std::string> meta = metadata_;
  std::vector<std::string> lines;
  crcs.clear();
  for (const Entry& e : entries_) {
    crcs.push_back(crc32_of(e.data));
    meta[std::string(kCrcKeyPrefix) + e.name] = crc32_hex(crcs.back());
    lines.push_back(safetensors_detail::tensor_line(e.name, e.dtype, e.shape));
  }
  meta[std::string(kHeaderCrcKey)] = crc32_hex(safetensors_detail::header_crc(lines, meta));
  OrderedJson h = OrderedJson::object();
  OrderedJson m = OrderedJson::object();
  for (const auto& [k, v] : meta) m[k] = v;
  h["__metadata__"] = std::move(m);
  int64_t offset = 0;
  for (const Entry& e : entries_) {
    const int64_t end = offset + int64_t(e.data.size());
    OrderedJson entry = OrderedJson::object();
    entry["dtype"] = dtype_name(e.dtype);
    entry["shape"] = OrderedJson::array();
    for (int64_t d : e.shape) entry["shape"].push_back(d);
    entry["data_offsets"] = OrderedJson::array({offset, end});
    h[e.name] = std::move(entry);
    offset = end;
  }
  std::string text = h.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // data starts 8-byte aligned
  std::vector<uint8_t> out(8 + text.size());
  const uint64_t n = text.size();
  std::memcpy(out.data(), &n, 8);
  std::memcpy(out.data() + 8, text.data(), text.size());
  return out;
}

std::vector<uint8_t> SafetensorsWriter::to_bytes() const {
  std::vector<uint8_t> out = header();
  for (const Entry& e : entries_) out.insert(out.end(), e.data.begin(), e.data.end());
  return out;
}

FileDigest SafetensorsWriter::write(const std::string& path) const {
  std::vector<uint32_t> crcs;
  const std::vector<uint8_t> head = header(crcs);
  FileDigest d{head.size(), crc32_of(head)};
  AtomicFile f(path);
  f.write(head);
  for (size_t i = 0; i < entries_.size(); ++i) {
    const std::vector<uint8_t>& data = entries_[i].data;
    f.write(data);
    d.crc32 = uint32_t(::crc32_combine(d.crc32, crcs[i], z_off_t(data.size())));
    d.bytes += data.size();
  }
  f.commit();
  return d;
}

}  // namespace mpicnn
