// Format names and the host's format conversion (core/format.h).
#include "core/format.h"

#include "core/half.h"
#include "core/tensor.h"

namespace mpicnn {

const char* elem_name(Elem t) {
  switch (t) {
    case Elem::F32: return sizeof(real) == 4 ? "f32" : "f64";
    case Elem::BF16: return "bf16";
    case Elem::F16: return "f16";
  }
  return "?";
}

const char* format_name(Format f) {
  static const char* const names[3][2] = {{"f32 NCHW", "f32 NHWC"},
                                          {"bf16 NCHW", "bf16 NHWC"},
                                          {"f16 NCHW", "f16 NHWC"}};
  if (sizeof(real) != 4 && f.elem == Elem::F32)
    return f.order == Order::NCHW ? "f64 NCHW" : "f64 NHWC";
  return names[int(f.elem)][int(f.order)];
}

namespace {
real load(Elem t, const void* p, int64_t i) {
  switch (t) {
    case Elem::F32: return static_cast<const real*>(p)[i];
    case Elem::BF16: return real(bf16_to_float(static_cast<const uint16_t*>(p)[i]));
    case Elem::F16: return real(half_to_float(static_cast<const uint16_t*>(p)[i]));
  }
  return 0;
}
void store(Elem t, void* p, int64_t i, real v) {
  switch (t) {
    case Elem::F32: static_cast<real*>(p)[i] = v; return;
    case Elem::BF16: static_cast<uint16_t*>(p)[i] = float_to_bf16(float(v)); return;
    case Elem::F16: static_cast<uint16_t*>(p)[i] = float_to_half(float(v)); return;
  }
}
}  // namespace

Tensor convert_host(const Tensor& src, Format format) {
  CHECK(src.device() == Device::CPU, "convert_host: a ", device_name(src.device()), " tensor");
  const bool to_nhwc = format.order == Order::NHWC, from_nhwc = src.format().order == Order::NHWC;
  CHECK((!to_nhwc && !from_nhwc) || src.dim() == 4, "convert_host: NHWC needs 4 dimensions, ",
        src.shape().str());
  Tensor out = Tensor::empty(src.shape(), Device::CPU, format);
  const Elem st = src.format().elem, dt = format.elem;
  if (src.dim() != 4) {
    for (int64_t i = 0, n = src.numel(); i < n; ++i) store(dt, out.raw(), i, load(st, src.raw(), i));
    return out;
  }
  const int64_t N = src.size(0), C = src.size(1), H = src.size(2), W = src.size(3);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t w = 0; w < W; ++w) {
          const int64_t nchw = ((n * C + c) * H + h) * W + w, nhwc = ((n * H + h) * W + w) * C + c;
          store(dt, out.raw(), to_nhwc ? nhwc : nchw,
                load(st, src.raw(), from_nhwc ? nhwc : nchw));
        }
  return out;
}

}  // namespace mpicnn
