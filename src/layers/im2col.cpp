// im2col / col2im on CPU with OpenMP. Large planes: the valid (non-padding) output range of
// every kernel tap is computed up front, so the inner loops carry no bounds tests and, for
// stride 1, are contiguous copies / adds that vectorise. Small planes: a precomputed offset
// table (see ColumnPlan in im2col.h).
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

// Where one kernel tap reads: its offsets and the outputs whose reads are inside the image.
struct Tap {
  int64_t off_h, off_w;
  Range rh, rw;
};

Tap tap_of(const ConvGeometry& g, int64_t tap) {
  const int64_t kh = tap / g.kernel_w, kw = tap % g.kernel_w;
  Tap t;
  t.off_h = kh * g.dilation_h - g.pad_h;
  t.off_w = kw * g.dilation_w - g.pad_w;
  t.rh = valid_range(g.height, g.out_h, g.stride_h, t.off_h);
  t.rw = valid_range(g.width, g.out_w, g.stride_w, t.off_w);
  return t;
}

// Below this many column elements the OpenMP fork/join costs more than it saves.
constexpr int64_t kParallelMin = 1 << 15;
// Output planes up to this many pixels use the offset table. What matters is 1x1 to 4x4
// planes, where the range path spent most of its time on per-row setup (ResNet-18 inference
// at 32x32: im2col 35% -> 13% of the time); thresholds from 16 to 1024 measured alike.
constexpr int64_t kTablePlane = 64;

}  // namespace

ColumnPlan::ColumnPlan(const ConvGeometry& g) : g_(g) {
  for (int64_t t = 0; t < g.taps(); ++t) {
    const Tap tp = tap_of(g, t);
    if (tp.rh.hi > tp.rh.lo && tp.rw.hi > tp.rw.lo) taps_.push_back(int32_t(t));
  }
  const int64_t P = g.out_plane();
  if (P > kTablePlane) return;
  index_.assign(taps_.size() * size_t(P), -1);
  for (size_t j = 0; j < taps_.size(); ++j) {
    const Tap tp = tap_of(g, taps_[j]);
    for (int64_t oh = tp.rh.lo; oh < tp.rh.hi; ++oh)
      for (int64_t ow = tp.rw.lo; ow < tp.rw.hi; ++ow)
        index_[j * size_t(P) + size_t(oh * g.out_w + ow)] =
            int32_t((oh * g.stride_h + tp.off_h) * g.width + ow * g.stride_w + tp.off_w);
  }
}

void ColumnPlan::im2col(real* col, const real* in, int64_t batch) const {
  const ConvGeometry& g = g_;
  const int64_t T = int64_t(taps_.size()), R = rows();
  const int64_t P = g.out_plane(), ld = batch * P, OW = g.out_w, W = g.width;
  const int64_t SW = g.stride_w, HW = g.in_plane();
  if (uses_table()) {
#pragma omp parallel for schedule(static) if (R * ld > kParallelMin)
    for (int64_t r = 0; r < R; ++r) {
      const int64_t c = r / T;
      const int32_t* __restrict idx = index_.data() + (r % T) * P;
      real* __restrict dst = col + r * ld;
      for (int64_t b = 0; b < batch; ++b, dst += P) {
        const real* __restrict src = in + (b * g.channels + c) * HW;
        for (int64_t p = 0; p < P; ++p) dst[p] = idx[p] >= 0 ? src[idx[p]] : 0.f;
      }
    }
    return;
  }
  // Row-major over (row, image): consecutive iterations write consecutive memory.
#pragma omp parallel for collapse(2) schedule(static) if (R * ld > kParallelMin)
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t c = r / T;
      const Tap tp = tap_of(g, taps_[size_t(r % T)]);
      const Range rh = tp.rh, rw = tp.rw;
      const int64_t off_h = tp.off_h, off_w = tp.off_w;
      const real* __restrict src = in + (b * g.channels + c) * HW;
      real* __restrict dst = col + r * ld + b * P;
      std::memset(dst, 0, size_t(rh.lo * OW) * sizeof(real));
      for (int64_t oh = rh.lo; oh < rh.hi; ++oh) {
        real* __restrict d = dst + oh * OW;
        const real* __restrict s = src + (oh * g.stride_h + off_h) * W;
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
      std::memset(dst + rh.hi * OW, 0, size_t((g.out_h - rh.hi) * OW) * sizeof(real));
    }
  }
}

void ColumnPlan::col2im(real* din, const real* col, int64_t batch) const {
  const ConvGeometry& g = g_;
  const int64_t C = g.channels, T = int64_t(taps_.size());
  const int64_t P = g.out_plane(), ld = batch * P, OW = g.out_w, W = g.width;
  const int64_t SW = g.stride_w, HW = g.in_plane();
  // One (image, channel) plane per iteration: every plane is written by exactly one thread,
  // in a fixed tap order, so the sums are race-free and deterministic.
#pragma omp parallel for collapse(2) schedule(static) if (rows() * ld > kParallelMin)
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t c = 0; c < C; ++c) {
      real* __restrict dst = din + (b * C + c) * HW;
      std::memset(dst, 0, size_t(HW) * sizeof(real));
      for (int64_t j = 0; j < T; ++j) {
        const real* __restrict src = col + (c * T + j) * ld + b * P;
        if (uses_table()) {
          const int32_t* __restrict idx = index_.data() + j * P;
          for (int64_t p = 0; p < P; ++p)
            if (idx[p] >= 0) dst[idx[p]] += src[p];
          continue;
        }
        const Tap tp = tap_of(g, taps_[size_t(j)]);
        for (int64_t oh = tp.rh.lo; oh < tp.rh.hi; ++oh) {
          real* __restrict d = dst + (oh * g.stride_h + tp.off_h) * W + tp.off_w;
          const real* __restrict s = src + oh * OW;
          if (SW == 1) {
            for (int64_t ow = tp.rw.lo; ow < tp.rw.hi; ++ow) d[ow] += s[ow];
          } else if (SW == 2) {
            for (int64_t ow = tp.rw.lo; ow < tp.rw.hi; ++ow) d[2 * ow] += s[ow];
          } else {
            for (int64_t ow = tp.rw.lo; ow < tp.rw.hi; ++ow) d[ow * SW] += s[ow];
          }
        }
      }
    }
  }
}

}  // namespace mpicnn
