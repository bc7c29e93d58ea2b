// Validation helpers shared by the safetensors reader and writer; not part of the public API.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "io/safetensors.h"

namespace mpicnn::safetensors_detail {

// Position of the first byte that breaks UTF-8, or npos.
size_t invalid_utf8_at(std::string_view s);
// Byte size of a tensor of this shape, or nullopt when it leaves int64.
std::optional<int64_t> checked_nbytes(const Dims& shape, size_t elem_size);

}  // namespace mpicnn::safetensors_detail
