// im2col / col2im on CPU with OpenMP. The valid (non-padding) output range of every kernel
// tap is computed up front, so the inner loops carry no bounds tests and, for stride 1, are
// plain contiguous copies / adds that the compiler vectorises.
#include "layers/im2col.h"

#include <algorithm>
#include <cstring>

namespace mpicnn {

namespace {

// Outputs o in [lo, hi) read input index i = o*stride + offset inside [0, in).
struct Range {
  int64_t lo, hi;
};

Range valid_range(int64_t in, int64_t out, int64_t stride, int64_t offset) {
  int64_t lo = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
  int64_t hi = in - offset <= 0 ? 0 : (in - offset + stride - 1) / stride;
  lo = std::min(lo, out);
  hi = std::clamp(hi, lo, out);
  return {lo, hi};
}

// Below this many column elements the OpenMP fork/join costs more than it saves.
constexpr int64_t kParallelMin = 1 << 15;

}  // namespace

void im2col(float* col, const float* in, const ConvGeometry& g, int64_t batch) {
  const int64_t taps = g.kernel_h * g.kernel_w, rows = g.rows();
  const int64_t P = g.out_plane(), ld = batch * P, OW = g.out_w, W = g.width;
  const int64_t SW = g.stride_w;
  // Row-major over (row, image): consecutive iterations write consecutive memory.
#pragma omp parallel for collapse(2) schedule(static) if (rows * ld > kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t c = r / taps, kh = (r % taps) / g.kernel_w, kw = r % g.kernel_w;
      const int64_t off_h = kh * g.dilation_h - g.pad_h, off_w = kw * g.dilation_w - g.pad_w;
      const Range rh = valid_range(g.height, g.out_h, g.stride_h, off_h);
      const Range rw = valid_range(W, OW, SW, off_w);
      const float* __restrict src = in + (b * g.channels + c) * g.in_plane();
      float* __restrict dst = col + r * ld + b * P;
      std::memset(dst, 0, size_t(rh.lo * OW) * sizeof(float));
      for (int64_t oh = rh.lo; oh < rh.hi; ++oh) {
        float* __restrict d = dst + oh * OW;
        const float* __restrict s = src + (oh * g.stride_h + off_h) * W;
        for (int64_t ow = 0; ow < rw.lo; ++ow) d[ow] = 0.f;
        if (SW == 1) {
          for (int64_t ow = rw.lo; ow < rw.hi; ++ow) d[ow] = s[ow + off_w];
        } else if (SW == 2) {  // a constant stride lets the compiler vectorise with shuffles
          for (int64_t ow = rw.lo; ow < rw.hi; ++ow) d[ow] = s[2 * ow + off_w];
        } else {
          for (int64_t ow = rw.lo; ow < rw.hi; ++ow) d[ow] = s[ow * SW + off_w];
        }
        for (int64_t ow = rw.hi; ow < OW; ++ow) d[ow] = 0.f;
      }
      std::memset(dst + rh.hi * OW, 0, size_t((g.out_h - rh.hi) * OW) * sizeof(float));
    }
  }
}

void col2im(float* din, const float* col, const ConvGeometry& g, int64_t batch) {
  const int64_t C = g.channels, P = g.out_plane(), ld = batch * P, OW = g.out_w, W = g.width;
  const int64_t SW = g.stride_w;
  // One (image, channel) plane per iteration: every plane is written by exactly one thread,
  // in a fixed tap order, so the sums are race-free and deterministic.
#pragma omp parallel for collapse(2) schedule(static) if (g.rows() * ld > kParallelMin)
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t c = 0; c < C; ++c) {
      float* __restrict dst = din + (b * C + c) * g.in_plane();
      std::memset(dst, 0, size_t(g.in_plane()) * sizeof(float));
      for (int64_t kh = 0; kh < g.kernel_h; ++kh) {
        for (int64_t kw = 0; kw < g.kernel_w; ++kw) {
          const int64_t off_h = kh * g.dilation_h - g.pad_h, off_w = kw * g.dilation_w - g.pad_w;
          const Range rh = valid_range(g.height, g.out_h, g.stride_h, off_h);
          const Range rw = valid_range(W, OW, SW, off_w);
          const float* __restrict src =
              col + ((c * g.kernel_h + kh) * g.kernel_w + kw) * ld + b * P;
          for (int64_t oh = rh.lo; oh < rh.hi; ++oh) {
            float* __restrict d = dst + (oh * g.stride_h + off_h) * W;
            const float* __restrict s = src + oh * OW;
            if (SW == 1) {
              for (int64_t ow = rw.lo; ow < rw.hi; ++ow) d[ow + off_w] += s[ow];
            } else if (SW == 2) {
              for (int64_t ow = rw.lo; ow < rw.hi; ++ow) d[2 * ow + off_w] += s[ow];
            } else {
              for (int64_t ow = rw.lo; ow < rw.hi; ++ow) d[ow * SW + off_w] += s[ow];
            }
          }
        }
      }
    }
  }
}

}  // namespace mpicnn
