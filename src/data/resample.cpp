// The PIL-compatible resampler: fixed-point taps as PIL computes them, the scalar passes, the
// per-thread scratch, resample() (only the window a crop keeps) and the public 8-bit geometry.
// The AVX-512 kernels are in resample_avx512.cpp; normalisation and augmentation in transform.cpp.
#include "data/resample.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "data/resample_detail.h"

namespace mpicnn::data {

using namespace resample_detail;

namespace {

// PIL's precompute_coeffs + normalize_coeffs_8bpc for the box (0, in_size), evaluated in the same
// order in double precision, so the fixed-point weights are PIL's to the bit. `C` is the number
// of interleaved channels a horizontal pass reads (for the SIMD grouping); 0 for vertical taps.
void pil_taps(Taps& t, int in_size, int out_size, int first, int count, int C) {
  const double scale = double(float(in_size)) / out_size;
  const double filterscale = scale < 1.0 ? 1.0 : scale;
  const double support = 1.0 * filterscale;  // bilinear support is 1
  const int pil_ksize = int(std::ceil(support)) * 2 + 1;
  const double ss = 1.0 / filterscale;
  std::vector<int>& xmin = t.xmin;
  std::vector<int>& xcnt = t.xcnt;
  xmin.resize(size_t(count));
  xcnt.resize(size_t(count));
  t.w.resize(size_t(pil_ksize));
  // First pass: PIL's bounds, to size the windows.
  for (int i = 0; i < count; ++i) {
    const double center = (first + i + 0.5) * scale;
    int lo = int(center - support + 0.5);
    if (lo < 0) lo = 0;
    int hi = int(center + support + 0.5);
    if (hi > in_size) hi = in_size;
    xmin[size_t(i)] = lo;
    xcnt[size_t(i)] = hi - lo;
  }
  t.lo = xmin[0];
  t.hi = xmin[size_t(count - 1)] + xcnt[size_t(count - 1)];
  t.ksize = std::min(pil_ksize, t.hi - t.lo);
  t.start.resize(size_t(count));
  t.k.assign(size_t(count) * t.ksize, 0);
  for (int i = 0; i < count; ++i) {
    const double center = (first + i + 0.5) * scale;
    const int lo = xmin[size_t(i)], n = xcnt[size_t(i)];
    double ww = 0.0;
    for (int x = 0; x < n; ++x) {
      double a = (x + lo - center + 0.5) * ss;
      if (a < 0.0) a = -a;
      const double w = a < 1.0 ? 1.0 - a : 0.0;
      t.w[size_t(x)] = w;
      ww += w;
    }
    const int s = std::min(lo, t.hi - t.ksize);
    t.start[size_t(i)] = s;
    int32_t* k = &t.k[size_t(i) * t.ksize + (lo - s)];
    for (int x = 0; x < n; ++x) {
      double w = t.w[size_t(x)];
      if (ww != 0.0) w /= ww;
      k[x] = w < 0 ? int(-0.5 + w * (1 << kPrecisionBits)) : int(0.5 + w * (1 << kPrecisionBits));
    }
  }
#ifdef MPICNN_HPASS_SIMD
  group_taps_avx512(t, count, C);
#else
  (void)C;
#endif
}

// `in` holds `avail` bytes of the row from the start of the region.
void hpass_row(uint8_t* out, const uint8_t* in, std::size_t avail, const Taps& t, int count, int C) {
#ifdef MPICNN_HPASS_SIMD
  hpass_row_avx512(out, in, avail, t, count, C);
#else
  (void)avail;
  if (C == 1)
    hpass_scalar<1>(out, in, t, 0, count, count);
  else
    hpass_scalar<3>(out, in, t, 0, count, count);
#endif
}

// Vertical pass for one output row: n bytes from ksize rows `stride` apart.
void vpass_row(uint8_t* out, const uint8_t* in, std::size_t stride, const int32_t* k, int ksize,
               int n, int32_t* acc) {
  int x0 = 0;
#ifdef MPICNN_HPASS_SIMD
  x0 = vpass_row_avx512(out, in, stride, k, ksize, n);
#endif
  n -= x0, out += x0, in += x0;
  for (int x = 0; x < n; ++x) acc[x] = kHalf;
  for (int j = 0; j < ksize; ++j) {
    const uint8_t* row = in + j * stride;
    const int32_t kj = k[j];
    for (int x = 0; x < n; ++x) acc[x] += int32_t(row[x]) * kj;
  }
  for (int x = 0; x < n; ++x) out[x] = clip8(acc[x]);
}

// Per-thread buffers, grown to the largest image seen and then reused: resample() allocates
// nothing in steady state, and concurrent calls never share memory.
struct Scratch {
  Taps th, tv;
  std::vector<uint8_t> tmp, row;
  std::vector<int32_t> acc;
};
Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// Python's round() of x / 2 for an integer x: half to even.
int half_round_even(int x) {
  const int q = x >> 1;  // floor
  if ((x & 1) == 0) return q;
  return (q & 1) ? q + 1 : q;
}

}  // namespace

// ---- resampling a window ---------------------------------------------------------------------

void resample(const Image& img, const Placement& p, int height, int width, RowSink sink) {
  const int C = img.channels;
  const int y0 = std::max(p.top, 0), y1 = std::min(p.top + height, p.resized_height);
  const int x0 = std::max(p.left, 0), x1 = std::min(p.left + width, p.resized_width);
  if (y0 >= y1 || x0 >= x1) return;
  const int nx = x1 - x0, ny = y1 - y0;
  const bool need_h = p.resized_width != p.src_width, need_v = p.resized_height != p.src_height;
  Scratch& s = scratch();
  // Rows of the source region the vertical pass reads (all output rows when no vertical pass).
  int r0 = y0, r1 = y1;
  if (need_v) {
    pil_taps(s.tv, p.src_height, p.resized_height, y0, ny, 0);
    r0 = s.tv.lo, r1 = s.tv.hi;
  }
  const std::size_t img_stride = std::size_t(img.width) * C;
  const uint8_t* src = img.pixels.data() + std::size_t(p.src_top) * img_stride + std::size_t(p.src_left) * C;
  // Rows after the horizontal pass: in scratch (source row r at rows + (r - r0) * stride), or the
  // image itself (columns x0.. of the region, r0 = 0).
  const uint8_t* rows;
  std::size_t stride;
  if (need_h) {
    pil_taps(s.th, p.src_width, p.resized_width, x0, nx, C);
    stride = std::size_t(nx) * C;
    s.tmp.resize(std::size_t(r1 - r0) * stride);
    for (int r = r0; r < r1; ++r) {
      uint8_t* out = s.tmp.data() + std::size_t(r - r0) * stride;
      const uint8_t* in = src + std::size_t(r) * img_stride;
      const std::size_t avail = std::size_t(p.src_width) * C;
      hpass_row(out, in, avail, s.th, nx, C);
    }
    rows = s.tmp.data();
  } else {
    stride = img_stride;
    rows = src + std::size_t(x0) * C;
    r0 = 0;
  }
  const int n = nx * C;
  if (need_v) {
    s.row.resize(std::size_t(n));
    s.acc.resize(std::size_t(n));
  }
  for (int y = y0; y < y1; ++y) {
    const uint8_t* line;
    if (need_v) {
      const int i = y - y0;
      vpass_row(s.row.data(), rows + std::size_t(s.tv.start[size_t(i)] - r0) * stride, stride,
                &s.tv.k[size_t(i) * s.tv.ksize], s.tv.ksize, n, s.acc.data());
      line = s.row.data();
    } else {
      line = rows + std::size_t(y - r0) * stride;
    }
    sink(y - p.top, x0 - p.left, nx, line, need_h);
  }
}

void check_placement(const Image& img, const Placement& p, int height, int width) {
  CHECK(img.channels == 1 || img.channels == 3, "image has ", img.channels, " channels (1 or 3)");
  CHECK(img.pixels.size() == std::size_t(img.height) * img.width * img.channels, "image buffer holds ",
        img.pixels.size(), " bytes, not ", img.height, "x", img.width, "x", img.channels);
  CHECK(p.src_height > 0 && p.src_width > 0 && p.src_top >= 0 && p.src_left >= 0 &&
            p.src_top + p.src_height <= img.height && p.src_left + p.src_width <= img.width,
        "source region ", p.src_height, "x", p.src_width, " at (", p.src_top, ", ", p.src_left,
        ") is not inside the ", img.height, "x", img.width, " image");
  CHECK(p.resized_height > 0 && p.resized_width > 0, "resize to ", p.resized_height, "x",
        p.resized_width);
  CHECK(height > 0 && width > 0, "output size ", height, "x", width);
}

// 8-bit output of the placement (no flip), zeros outside the resized region.
Image resample_image(const Image& img, const Placement& p, int height, int width) {
  check_placement(img, p, height, width);
  Image out(height, width, img.channels);  // zero-filled
  const int C = img.channels;
  resample(img, p, height, width, [&](int y, int x, int n, const uint8_t* line, bool planar) {
    uint8_t* o = out.row(y) + std::size_t(x) * C;
    if (!planar || C == 1)
      std::memcpy(o, line, std::size_t(n) * C);
    else
      for (int i = 0; i < n; ++i)
        for (int c = 0; c < C; ++c) o[i * C + c] = line[c * n + i];
  });
  return out;
}

Placement whole(const Image& in) {
  Placement p;
  p.src_height = p.resized_height = in.height;
  p.src_width = p.resized_width = in.width;
  return p;
}

// ---- 8-bit geometry ----------------------------------------------------------------------------

Image resize(const Image& in, int height, int width) {
  Placement p = whole(in);
  p.resized_height = height, p.resized_width = width;
  return resample_image(in, p, height, width);
}

std::pair<int, int> resized_shorter_size(int height, int width, int size) {
  CHECK(height > 0 && width > 0 && size > 0, "resize: cannot resize a ", height, "x", width,
        " image to shorter side ", size);
  const int shorter = std::min(height, width), longer = std::max(height, width);
  // int(size * long / short) in Python: exact product, correctly rounded quotient, truncated.
  const int other = int(double(int64_t(size) * longer) / double(shorter));
  return width <= height ? std::pair{other, size} : std::pair{size, other};
}

Image resize_shorter(const Image& in, int size) {
  const auto [h, w] = resized_shorter_size(in.height, in.width, size);
  return resize(in, h, w);
}

Image crop(const Image& in, int top, int left, int height, int width) {
  Placement p = whole(in);
  p.top = top, p.left = left;
  return resample_image(in, p, height, width);
}

std::pair<int, int> center_crop_origin(int height, int width, int crop_height, int crop_width) {
  // Larger crop: torchvision pads (crop - size) // 2 on the top/left first, then crops at 0.
  const int top =
      crop_height > height ? -((crop_height - height) / 2) : half_round_even(height - crop_height);
  const int left = crop_width > width ? -((crop_width - width) / 2) : half_round_even(width - crop_width);
  return {top, left};
}

Image center_crop(const Image& in, int crop_height, int crop_width) {
  const auto [top, left] = center_crop_origin(in.height, in.width, crop_height, crop_width);
  return crop(in, top, left, crop_height, crop_width);
}

}  // namespace mpicnn::data
