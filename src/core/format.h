// How a tensor's elements are stored: their type and, for 4-D tensors, their memory order.
// The CPU engine and the GPU's default path use one format only, `real` in NCHW order (plain).
// The GPU's channels-last path (--gpu-layout nhwc) keeps its 4-D activations in NHWC order as
// float32, bfloat16 or float16, by --precision; its parameters, 2-D activations (logits, the
// classifier head) and every CPU tensor stay plain. Not a type system: kernels take raw
// pointers and the format, and a layer without a path for a format refuses it by name.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/real.h"

namespace mpicnn {

// F32: `real` (float; double in the F64 test build). BF16 and F16: core/half.h's encodings.
enum class Elem : uint8_t { F32, BF16, F16 };
// NCHW: row-major in the logical (N, C, H, W) order, as every tensor of fewer or more
// dimensions. NHWC: element (n, c, h, w) at ((n * H + h) * W + w) * C + c.
enum class Order : uint8_t { NCHW, NHWC };

struct Format {
  Elem elem = Elem::F32;
  Order order = Order::NCHW;
  bool plain() const { return elem == Elem::F32 && order == Order::NCHW; }
  bool operator==(const Format& o) const { return elem == o.elem && order == o.order; }
  bool operator!=(const Format& o) const { return !(*this == o); }
};

constexpr size_t elem_bytes(Elem t) { return t == Elem::F32 ? sizeof(real) : 2; }
const char* elem_name(Elem t);  // "f32", "bf16", "f16"
const char* format_name(Format f);  // "f32 NCHW", "bf16 NHWC", ...

}  // namespace mpicnn
