// Validation helpers shared by the safetensors reader and writer; not part of the public API.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>
#include <optional>
#include <string_view>

#include "io/safetensors.h"

namespace mpicnn::safetensors_detail {

// Position of the first byte that breaks UTF-8, or npos.
size_t invalid_utf8_at(std::string_view s);
// Byte size of a tensor of this shape, or nullopt when it leaves int64.
std::optional<int64_t> checked_nbytes(const Dims& shape, size_t elem_size);
// The "crc32-header" value: CRC-32 of one line per tensor ("name\0dtype\0shape\n", sorted by
// name) followed by one per metadata entry other than that key ("key\0value\n", sorted).
// `tensors` holds the unsorted tensor lines (tensor_line).
std::string tensor_line(const std::string& name, DType dtype, const Dims& shape);
uint32_t header_crc(std::vector<std::string> tensor_lines,
                    const std::map<std::string, std::string>& metadata);

}  // namespace mpicnn::safetensors_detail
