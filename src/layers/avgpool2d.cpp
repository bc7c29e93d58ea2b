// AvgPool2d forward/backward on CPU: OpenMP over (N*C) planes. Sums in float in PyTorch's
// order and divides the way it does, so results match torch to the last bit or close to it.
// Not a separable or running-sum implementation: windows are small in the networks we train.
#include "layers/avgpool2d.h"

#include <algorithm>
#include <optional>
#include <string>

#include "core/gpu.h"

#include "layers/pool_common.h"

namespace mpicnn {

namespace {

// One axis of a window: real cells [begin, end) and the extent counted with padding, which
// is clipped to the padded input (PyTorch: end = min(start + k, size + pad)).
struct Span {
  int64_t begin, end, padded;
};

inline Span span(int64_t o, int kernel, int stride, int pad, int64_t size) {
  const int64_t start = o * stride - pad;
  const int64_t stop = std::min(start + kernel, size + pad);
  return {std::max<int64_t>(start, 0), std::min(stop, size), stop - start};
}

inline real divisor(const Span& h, const Span& w, const AvgPool2dOptions& o) {
  if (o.divisor_override) return real(*o.divisor_override);
  if (o.count_include_pad) return real(h.padded * w.padded);
  return real((h.end - h.begin) * (w.end - w.begin));
}

// 2x2 windows at stride 2 that tile the plane exactly (DenseNet's transitions): every window
// whole, every cell in one window. tiling_2x2 gives their divisor where the windows are so;
// avg_plane_2x2 and its backward compute the same sums in the same order as avg_plane and
// avg_plane_backward (0 + the cells row by row; 0 + each cell's share), in loops that
// vectorise.
std::optional<real> tiling_2x2(int64_t H, int64_t W, int64_t OH, int64_t OW,
                               const AvgPool2dOptions& o) {
  const bool tiles = o.kernel[0] == 2 && o.kernel[1] == 2 && o.stride[0] == 2 &&
                     o.stride[1] == 2 && o.padding[0] == 0 && o.padding[1] == 0 &&
                     H == 2 * OH && W == 2 * OW;
  if (!tiles) return std::nullopt;
  return divisor(span(0, 2, 2, 0, H), span(0, 2, 2, 0, W), o);
}

void avg_plane_2x2(real* __restrict y, const real* __restrict x, int64_t W, int64_t OH,
                   int64_t OW, real div) {
  for (int64_t oh = 0; oh < OH; ++oh) {
    const real* __restrict r0 = x + 2 * oh * W;
    const real* __restrict r1 = r0 + W;
    real* __restrict yr = y + oh * OW;
#pragma omp simd
    for (int64_t ow = 0; ow < OW; ++ow)
      yr[ow] = ((((0.f + r0[2 * ow]) + r0[2 * ow + 1]) + r1[2 * ow]) + r1[2 * ow + 1]) / div;
  }
}

void avg_plane_2x2_backward(real* __restrict dx, const real* __restrict dy, int64_t W,
                            int64_t OH, int64_t OW, real div) {
  for (int64_t oh = 0; oh < OH; ++oh) {
    real* __restrict r0 = dx + 2 * oh * W;
    real* __restrict r1 = r0 + W;
    const real* __restrict d = dy + oh * OW;
#pragma omp simd
    for (int64_t ow = 0; ow < OW; ++ow) {
      const real g = 0.f + d[ow] / div;
      r0[2 * ow] = r0[2 * ow + 1] = r1[2 * ow] = r1[2 * ow + 1] = g;
    }
  }
}

// y (OH, OW) from x (H, W).
void avg_plane(real* y, const real* x, int64_t H, int64_t W, int64_t OH, int64_t OW,
               const AvgPool2dOptions& o) {
  for (int64_t oh = 0; oh < OH; ++oh) {
    const Span sh = span(oh, o.kernel[0], o.stride[0], o.padding[0], H);
    for (int64_t ow = 0; ow < OW; ++ow) {
      const Span sw = span(ow, o.kernel[1], o.stride[1], o.padding[1], W);
      real sum = 0.f;
      for (int64_t h = sh.begin; h < sh.end; ++h)
        for (int64_t w = sw.begin; w < sw.end; ++w) sum += x[h * W + w];
      // A window of padding only cannot arise from the output-size rule; PyTorch writes 0.
      const bool empty = sh.begin >= sh.end || sw.begin >= sw.end;
      y[oh * OW + ow] = empty ? 0.f : sum / divisor(sh, sw, o);
    }
  }
}

// dx (H, W) '=' from dy (OH, OW).
void avg_plane_backward(real* dx, const real* dy, int64_t H, int64_t W, int64_t OH,
                        int64_t OW, const AvgPool2dOptions& o) {
  for (int64_t i = 0; i < H * W; ++i) dx[i] = 0.f;
  for (int64_t oh = 0; oh < OH; ++oh) {
    const Span sh = span(oh, o.kernel[0], o.stride[0], o.padding[0], H);
    for (int64_t ow = 0; ow < OW; ++ow) {
      const Span sw = span(ow, o.kernel[1], o.stride[1], o.padding[1], W);
      if (sh.begin >= sh.end || sw.begin >= sw.end) continue;
      const real g = dy[oh * OW + ow] / divisor(sh, sw, o);
      for (int64_t h = sh.begin; h < sh.end; ++h)
        for (int64_t w = sw.begin; w < sw.end; ++w) dx[h * W + w] += g;
    }
  }
}

}  // namespace

AvgPool2d::AvgPool2d(int kernel, int stride, int padding, bool ceil_mode, bool count_include_pad)
    : AvgPool2d(AvgPool2dOptions{.kernel = {kernel, kernel},
                                 .stride = {stride, stride},
                                 .padding = {padding, padding},
                                 .ceil_mode = ceil_mode,
                                 .count_include_pad = count_include_pad}) {}

AvgPool2d::AvgPool2d(const AvgPool2dOptions& opt) : opt_(opt) {
  check_pool_window("AvgPool2d", opt_.kernel, opt_.stride, opt_.padding);
  CHECK(!opt_.divisor_override || *opt_.divisor_override != 0,
        "AvgPool2d: divisor_override must not be 0");
}

Shape AvgPool2d::output_shape(const Shape& in) const {
  CHECK(in.ndim == 4, "AvgPool2d: input must be 4-D (N, C, H, W), got ", in.str());
  const auto& o = opt_;
  const int64_t oh =
      pool_output_size(in.d[2], o.kernel[0], o.stride[0], o.padding[0], 1, o.ceil_mode);
  const int64_t ow =
      pool_output_size(in.d[3], o.kernel[1], o.stride[1], o.padding[1], 1, o.ceil_mode);
  CHECK(oh >= 1 && ow >= 1, "AvgPool2d: input ", in.str(), " is too small for kernel ",
        hw_str(o.kernel), ", stride ", hw_str(o.stride), ", padding ", hw_str(o.padding),
        " (output would be ", oh, "x", ow, ")");
  return {in.d[0], in.d[1], oh, ow};
}

gpu::PoolDesc AvgPool2d::desc(const Shape& in) const {
  const Shape os = output_shape(in);
  gpu::PoolDesc d;
  d.c = int(in[1]), d.h = int(in[2]), d.w = int(in[3]), d.oh = int(os[2]), d.ow = int(os[3]);
  d.kh = opt_.kernel[0], d.kw = opt_.kernel[1], d.stride_h = opt_.stride[0];
  d.stride_w = opt_.stride[1], d.pad_h = opt_.padding[0], d.pad_w = opt_.padding[1];
  d.count_include_pad = opt_.count_include_pad;
  d.divisor_override = opt_.divisor_override.value_or(0);
  return d;
}

void AvgPool2d::forward(Tensor& out, const Tensor& in) {
  const Shape os = output_shape(in.shape());
  CHECK(out.shape() == os, "AvgPool2d: out has shape ", out.shape().str(), ", expected ",
        os.str(), " for input ", in.shape().str());
  CHECK(!overlaps(out, in), "AvgPool2d: out must not alias in");
  if (on_gpu_as("AvgPool2d", in.format(), {&out, &in}))
    return gpu::backend().avgpool_forward(in.format(), out.raw(), in.raw(), in.size(0),
                                          desc(in.shape()));
  const int64_t H = in.size(2), W = in.size(3), OH = os.d[2], OW = os.d[3];
  const int64_t planes = os.d[0] * os.d[1];
  const real* x = in.data();
  real* y = out.data();
  const int64_t work = out.numel() * opt_.kernel[0] * opt_.kernel[1];
  if (const std::optional<real> div = tiling_2x2(H, W, OH, OW, opt_)) {
#pragma omp parallel for schedule(static) if (work > 32768)
    for (int64_t p = 0; p < planes; ++p)
      avg_plane_2x2(y + p * OH * OW, x + p * H * W, W, OH, OW, *div);
    return;
  }
#pragma omp parallel for schedule(static) if (work > 32768)
  for (int64_t p = 0; p < planes; ++p)
    avg_plane(y + p * OH * OW, x + p * H * W, H, W, OH, OW, opt_);
}

void AvgPool2d::backward(Tensor& din, const Tensor& dout, const Tensor& in, const Tensor& /*out*/) {
  if (!din.defined()) return;
  const Shape os = output_shape(in.shape());
  CHECK(din.shape() == in.shape() && dout.shape() == os, "AvgPool2d backward: din ",
        din.shape().str(), ", dout ", dout.shape().str(), " for input ", in.shape().str(),
        " (expected output ", os.str(), ")");
  CHECK(!overlaps(din, dout), "AvgPool2d backward: din must not alias dout");
  if (on_gpu_as("AvgPool2d backward", din.format(), {&din, &dout}))
    return gpu::backend().avgpool_backward(din.format(), din.raw(), dout.raw(), in.size(0),
                                           desc(in.shape()));
  const int64_t H = in.size(2), W = in.size(3), OH = os.d[2], OW = os.d[3];
  const int64_t planes = os.d[0] * os.d[1];
  const real* dy = dout.data();
  real* dx = din.data();
  const int64_t work = dout.numel() * opt_.kernel[0] * opt_.kernel[1] + din.numel();
  if (const std::optional<real> div = tiling_2x2(H, W, OH, OW, opt_)) {
#pragma omp parallel for schedule(static) if (work > 32768)
    for (int64_t p = 0; p < planes; ++p)
      avg_plane_2x2_backward(dx + p * H * W, dy + p * OH * OW, W, OH, OW, *div);
    return;
  }
#pragma omp parallel for schedule(static) if (work > 32768)
  for (int64_t p = 0; p < planes; ++p)
    avg_plane_backward(dx + p * H * W, dy + p * OH * OW, H, W, OH, OW, opt_);
}

}  // namespace mpicnn
