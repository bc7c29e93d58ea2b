// PIL-exact bilinear resampling of a region of an 8-bit image, fused with crop, flip, channel
// replication and normalization into the float (C, H, W) output; the transform spec and its
// random draws. Not a decoder and not a batcher: one image in, one sample out.
#include "data/transform.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <ostream>
#include <tuple>

#include "core/check.h"
#include "core/rng.h"

// The SIMD horizontal pass needs byte permutes across two registers (VBMI) and 16-bit
// dot products (VNNI): Ice Lake, Sapphire Rapids, Zen 4. Elsewhere the plain loop runs.
#if defined(__AVX512VBMI__) && defined(__AVX512VNNI__)
#define MPICNN_HPASS_SIMD 1
#endif

#ifdef MPICNN_HPASS_SIMD
// GCC 12 reports its own _mm512_undefined_* helpers as maybe-uninitialized once inlined.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif

namespace mpicnn::data {

namespace {

// PIL's Resample.c: 8-bit results need 8 bits, the sum of rounded coefficients may exceed 1, so
// 32 - 8 - 2 bits remain for the fixed-point weights.
constexpr int kPrecisionBits = 32 - 8 - 2;
constexpr int32_t kHalf = 1 << (kPrecisionBits - 1);

inline uint8_t clip8(int32_t v) {
  v >>= kPrecisionBits;  // arithmetic shift, as PIL's clip8 table lookup
  return static_cast<uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
}

// Fixed-point bilinear taps for outputs [first, first + count) of a resize in_size -> out_size.
// Each output reads a window of `ksize` inputs starting at start[i]; PIL's taps sit inside the
// window and the rest have weight 0, so every window has the same length (simple inner loops)
// and stays within [lo, hi), the inputs that carry weight for some output.
struct Taps {
  int ksize = 0, lo = 0, hi = 0;
  std::vector<int> start;       // (count)
  std::vector<int32_t> k;       // (count, ksize)
  std::vector<int> xmin, xcnt;  // (count) PIL's bounds, scratch
  std::vector<double> w;        // (PIL's ksize) one output's weights, scratch
#ifdef MPICNN_HPASS_SIMD
  // Runs of up to 16 consecutive outputs whose windows fit in 128 bytes of one row, computed
  // one output per 32-bit lane, taps in pairs (see hpass_row).
  struct Group {
    int first, count, start;
  };
  int pairs = 0;               // ceil(ksize / 2)
  std::vector<Group> groups;
  std::vector<uint8_t> index;  // (groups, pairs, C, 64) byte permutes: lane i = [tap 2q, 0, tap 2q+1, 0]
  std::vector<int16_t> kw;     // (groups, pairs, 2, 32): weight pairs by lane, high then low 11 bits
#endif
};

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
  t.groups.clear();
  t.index.clear();
  t.kw.clear();
  t.pairs = (t.ksize + 1) / 2;
  for (int i = 0; C > 0 && i < count;) {
    Taps::Group g{i, 1, t.start[size_t(i)]};  // groups of fewer than 4 run the plain loop
    while (g.count < 16 && i + g.count < count &&
           (t.start[size_t(i + g.count)] - g.start + t.ksize) * C <= 128)
      ++g.count;
    for (int q = 0; q < t.pairs; ++q) {
      for (int c = 0; c < C; ++c)
        for (int l = 0; l < 16; ++l)
          for (int b = 0; b < 4; ++b) {
            const int j = 2 * q + b / 2;  // bytes 1 and 3 are zeroed by the permute's mask
            const bool used = l < g.count && j < t.ksize && b % 2 == 0;
            t.index.push_back(used ? uint8_t((t.start[size_t(i + l)] - g.start + j) * C + c) : 0);
          }
      // k = hi * 2048 + lo, both < 2^15, so 16-bit products of 8-bit pixels stay exact.
      for (int part = 0; part < 2; ++part)
        for (int l = 0; l < 16; ++l)
          for (int b = 0; b < 2; ++b) {
            const int j = 2 * q + b;
            const int32_t k = l < g.count && j < t.ksize ? t.k[size_t(i + l) * t.ksize + j] : 0;
            t.kw.push_back(int16_t(part == 0 ? k >> 11 : k & 2047));
          }
    }
    t.groups.push_back(g);
    i += g.count;
  }
#else
  (void)C;
#endif
}

// Horizontal pass over one row of C interleaved channels; writes planar out[c * count + i].
template <int C, int K>
void hpass_scalar(uint8_t* out, const uint8_t* in, const Taps& t, int i0, int i1, int count) {
  const int ks = K > 0 ? K : t.ksize;
  for (int i = i0; i < i1; ++i) {
    const uint8_t* p = in + std::size_t(t.start[size_t(i)]) * C;
    const int32_t* k = &t.k[size_t(i) * ks];
    int32_t acc[C];
    for (int c = 0; c < C; ++c) acc[c] = kHalf;
    for (int j = 0; j < ks; ++j)
      for (int c = 0; c < C; ++c) acc[c] += int32_t(p[j * C + c]) * k[j];
    for (int c = 0; c < C; ++c) out[c * count + i] = clip8(acc[c]);
  }
}

template <int C>
void hpass_scalar(uint8_t* out, const uint8_t* in, const Taps& t, int i0, int i1, int count) {
  switch (t.ksize) {  // the common window lengths get unrolled loops
    case 2: return hpass_scalar<C, 2>(out, in, t, i0, i1, count);
    case 3: return hpass_scalar<C, 3>(out, in, t, i0, i1, count);
    case 5: return hpass_scalar<C, 5>(out, in, t, i0, i1, count);
    case 7: return hpass_scalar<C, 7>(out, in, t, i0, i1, count);
    default: return hpass_scalar<C, 0>(out, in, t, i0, i1, count);
  }
}

// `in` holds `avail` bytes of the row from the start of the region.
template <int C>
void hpass_row(uint8_t* out, const uint8_t* in, std::size_t avail, const Taps& t, int count) {
#ifdef MPICNN_HPASS_SIMD
  // One output per 32-bit lane: a byte permute picks two taps' pixels out of two 64-byte loads
  // as 16-bit pairs, and 16-bit dot products with the weights' high and low 11 bits accumulate
  // hi and lo sums; hi * 2048 + lo is PIL's integer sum exactly (so the result is identical,
  // 16 outputs at a time).
  const __m512i half = _mm512_set1_epi32(kHalf), zero = _mm512_setzero_si512();
  const __mmask64 even = 0x5555555555555555ull;
  const std::size_t index_step = std::size_t(t.pairs) * C * 64, kw_step = std::size_t(t.pairs) * 64;
  const uint8_t* index = t.index.data();
  const int16_t* kw = t.kw.data();
  for (const Taps::Group& g : t.groups) {
    if (g.count < 4) {  // windows too wide for a 128-byte load: plain loop
      hpass_scalar<C>(out, in, t, g.first, g.first + g.count, count);
      index += index_step, kw += kw_step;
      continue;
    }
    const std::size_t at = std::size_t(g.start) * C, left = avail - at;
    const __mmask64 m0 = left >= 64 ? ~__mmask64(0) : (__mmask64(1) << left) - 1;
    const __mmask64 m1 = left >= 128 ? ~__mmask64(0) : left <= 64 ? 0 : (__mmask64(1) << (left - 64)) - 1;
    const __m512i lo = _mm512_maskz_loadu_epi8(m0, in + at);
    const __m512i hi = _mm512_maskz_loadu_epi8(m1, in + at + 64);
    const __mmask16 lanes = __mmask16((1u << g.count) - 1);
    for (int c = 0; c < C; ++c) {
      __m512i acc_hi = zero, acc_lo = half;
      for (int q = 0; q < t.pairs; ++q) {
        const __m512i idx = _mm512_loadu_si512(index + (q * C + c) * 64);
        const __m512i px = _mm512_maskz_permutex2var_epi8(even, lo, idx, hi);
        acc_hi = _mm512_dpwssd_epi32(acc_hi, px, _mm512_loadu_si512(kw + q * 64));
        acc_lo = _mm512_dpwssd_epi32(acc_lo, px, _mm512_loadu_si512(kw + q * 64 + 32));
      }
      __m512i acc = _mm512_add_epi32(_mm512_slli_epi32(acc_hi, 11), acc_lo);
      acc = _mm512_max_epi32(_mm512_srai_epi32(acc, kPrecisionBits), zero);
      _mm_mask_storeu_epi8(out + c * count + g.first, lanes, _mm512_cvtusepi32_epi8(acc));
    }
    index += index_step, kw += kw_step;
  }
#else
  (void)avail;
  hpass_scalar<C>(out, in, t, 0, count, count);
#endif
}

// Vertical pass for one output row: n bytes from ksize rows `stride` apart.
void vpass_row(uint8_t* out, const uint8_t* in, std::size_t stride, const int32_t* k, int ksize,
               int n, int32_t* acc) {
  int x0 = 0;
#ifdef MPICNN_HPASS_SIMD
  // 16 outputs at a time with the pair trick of hpass_row: rows 2q and 2q+1 interleaved as
  // 16-bit pairs, weights split into high and low 11 bits; exact integer sums as PIL's.
  constexpr int kMaxPairs = 8;
  const int pairs = (ksize + 1) / 2;
  if (pairs <= kMaxPairs) {
    __m512i wh[kMaxPairs], wl[kMaxPairs];
    for (int q = 0; q < pairs; ++q) {
      const int32_t a = k[2 * q], b = 2 * q + 1 < ksize ? k[2 * q + 1] : 0;
      wh[q] = _mm512_set1_epi32(int32_t(uint32_t(b >> 11) << 16 | uint32_t(a >> 11)));
      wl[q] = _mm512_set1_epi32(int32_t(uint32_t(b & 2047) << 16 | uint32_t(a & 2047)));
    }
    // Lane i: byte i of the first row, byte i of the second (offset 64), high bytes zeroed.
    alignas(64) uint8_t pick[64] = {};
    for (int i = 0; i < 16; ++i) pick[4 * i] = uint8_t(i), pick[4 * i + 2] = uint8_t(64 + i);
    const __m512i idx = _mm512_load_si512(pick), half = _mm512_set1_epi32(kHalf);
    const __m512i zero = _mm512_setzero_si512();
    const __mmask64 even = 0x5555555555555555ull;
    for (; x0 + 16 <= n; x0 += 16) {
      __m512i acc_hi = zero, acc_lo = half;
      for (int q = 0; q < pairs; ++q) {
        const uint8_t* a = in + std::size_t(2 * q) * stride + x0;
        const uint8_t* b = 2 * q + 1 < ksize ? a + stride : a;  // weight 0 then
        const __m512i ra = _mm512_zextsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a)));
        const __m512i rb = _mm512_zextsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b)));
        const __m512i px = _mm512_maskz_permutex2var_epi8(even, ra, idx, rb);
        acc_hi = _mm512_dpwssd_epi32(acc_hi, px, wh[q]);
        acc_lo = _mm512_dpwssd_epi32(acc_lo, px, wl[q]);
      }
      __m512i v = _mm512_add_epi32(_mm512_slli_epi32(acc_hi, 11), acc_lo);
      v = _mm512_max_epi32(_mm512_srai_epi32(v, kPrecisionBits), zero);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + x0), _mm512_cvtusepi32_epi8(v));
    }
  }
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

// Per-thread buffers, grown to the largest image seen and then reused: apply() allocates
// nothing in steady state, and concurrent calls never share memory.
struct Scratch {
  Taps th, tv;
  std::vector<uint8_t> tmp, row;
  std::vector<int32_t> acc;
  Image converted;
};
Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// Resamples the region p.src_* of `img` to p.resized_* and hands the rows of the output window
// (height x width at p.top, p.left) that overlap the resized region to `sink`:
// sink(out_row, out_col0, ncols, row_bytes, planar): ncols * C bytes, interleaved (c fastest) or
// planar (ncols bytes per channel, after a horizontal pass). Rows and columns it never
// mentions lie outside the resized region (zeros). Only that overlap is computed: PIL's passes
// are separable and each output depends only on its own taps, so this is bit-exact with a full
// resize followed by a crop.
template <class Sink>
void resample(const Image& img, const Placement& p, int height, int width, Sink&& sink) {
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
      if (C == 1)
        hpass_row<1>(out, in, avail, s.th, nx);
      else
        hpass_row<3>(out, in, avail, s.th, nx);
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

// Python's round() of x / 2 for an integer x: half to even.
int half_round_even(int x) {
  const int q = x >> 1;  // floor
  if ((x & 1) == 0) return q;
  return (q & 1) ? q + 1 : q;
}

}  // namespace

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

// ---- recipes and parsing ----------------------------------------------------------------------

namespace {
constexpr std::pair<Geometry, const char*> kGeometryNames[] = {
    {Geometry::None, "none"},
    {Geometry::Resize, "resize"},
    {Geometry::ResizeCenterCrop, "resize-center-crop"},
    {Geometry::RandomResizedCrop, "random-resized-crop"},
    {Geometry::PadRandomCrop, "pad-random-crop"},
};
}  // namespace

const char* geometry_name(Geometry g) {
  for (const auto& [geo, name] : kGeometryNames)
    if (geo == g) return name;
  FAIL("geometry_name: unknown geometry ", int(g));
}

Geometry parse_geometry(const std::string& name, const std::string& what) {
  std::string known;
  for (const auto& [geo, n] : kGeometryNames) {
    if (name == n) return geo;
    known += known.empty() ? n : std::string(", ") + n;
  }
  FAIL(what, ": unknown geometry '", name, "' (", known, ")");
}

Preprocess imagenet_eval(int size, int resize, int channels) {
  Preprocess p;
  p.geometry = Geometry::ResizeCenterCrop;
  p.channels = channels;
  p.height = p.width = size;
  p.resize = resize;
  p.mean.assign(kImageNetMean.begin(), kImageNetMean.end());
  p.stddev.assign(kImageNetStd.begin(), kImageNetStd.end());
  if (channels == 1) p.mean.resize(1), p.stddev.resize(1);  // gray models: the red channel's stats
  return p;
}

Preprocess imagenet_train(uint64_t seed, int size, int channels) {
  Preprocess p = imagenet_eval(size, 0, channels);
  p.geometry = Geometry::RandomResizedCrop;
  p.hflip = true;
  p.seed = seed;
  return p;
}

Preprocess cifar_train(uint64_t seed, int size, int padding, int channels) {
  Preprocess p;
  p.geometry = Geometry::PadRandomCrop;
  p.channels = channels;
  p.height = p.width = size;
  p.padding = padding;
  p.hflip = true;
  p.seed = seed;
  p.mean.assign(kCifar10Mean.begin(), kCifar10Mean.begin() + (channels == 1 ? 1 : 3));
  p.stddev.assign(kCifar10Std.begin(), kCifar10Std.begin() + (channels == 1 ? 1 : 3));
  return p;
}

Preprocess normalize_only(int height, int width, int channels, std::vector<float> mean,
                          std::vector<float> stddev) {
  Preprocess p;
  p.geometry = Geometry::None;
  p.channels = channels;
  p.height = height, p.width = width;
  p.mean = std::move(mean);
  p.stddev = std::move(stddev);
  return p;
}

// ---- Transform ---------------------------------------------------------------------------------

namespace {
// Augmentation draws: stream per epoch, 64 indices per sample (RandomResizedCrop uses 40).
const uint64_t kAugmentStream = stream_id("data.augment");
constexpr uint64_t kDrawsPerSample = 64, kFlipDraw = 63;

// Streams a sample's name into an error message, or "sample <index>" when it has none; only
// formatted when a check fails.
struct SampleName {
  std::string_view name;
  uint64_t index;
};
std::ostream& operator<<(std::ostream& os, const SampleName& s) {
  return s.name.empty() ? os << "sample " << s.index : os << s.name;
}
}  // namespace

Transform::Transform(Preprocess spec) : spec_(std::move(spec)) {
  const Preprocess& s = spec_;
  CHECK(s.channels == 1 || s.channels == 3, "preprocessing: channels must be 1 or 3, got ", s.channels);
  CHECK(s.height > 0 && s.width > 0, "preprocessing: output size ", s.height, "x", s.width,
        " (give a crop or image size)");
  CHECK(s.resize >= 0, "preprocessing: resize ", s.resize, " is negative");
  CHECK(s.padding >= 0, "preprocessing: padding ", s.padding, " is negative");
  CHECK(s.geometry == Geometry::ResizeCenterCrop || s.resize == 0,
        "preprocessing: resize of the shorter side needs a center crop (else the output size "
        "depends on each image)");
  CHECK(s.geometry == Geometry::PadRandomCrop || s.padding == 0,
        "preprocessing: padding applies to the random crop only");
  if (s.geometry == Geometry::RandomResizedCrop) {
    CHECK(s.scale_min > 0 && s.scale_min <= s.scale_max, "preprocessing: random resized crop scale (",
          s.scale_min, ", ", s.scale_max, ") must satisfy 0 < min <= max");
    CHECK(s.ratio_min > 0 && s.ratio_min <= s.ratio_max, "preprocessing: random resized crop ratio (",
          s.ratio_min, ", ", s.ratio_max, ") must satisfy 0 < min <= max");
  }
  auto per_channel = [&](const std::vector<float>& v, const char* what, float none) {
    CHECK(v.empty() || v.size() == 1 || int(v.size()) == s.channels, "preprocessing: ", what, " has ",
          v.size(), " values; the model takes ", s.channels, " channel(s)");
    std::vector<float> out(size_t(s.channels), none);
    for (int c = 0; c < s.channels && !v.empty(); ++c) out[size_t(c)] = v.size() == 1 ? v[0] : v[size_t(c)];
    return out;
  };
  mean_ = per_channel(s.mean, "mean", 0.f);
  stddev_ = per_channel(s.stddev, "std", 1.f);
  const std::vector<float>& mean = mean_;
  const std::vector<float>& sd = stddev_;
  lut_.resize(size_t(s.channels) * 256);
  for (int c = 0; c < s.channels; ++c) {
    CHECK(std::isfinite(mean[size_t(c)]) && std::isfinite(sd[size_t(c)]) && sd[size_t(c)] != 0.f,
          "preprocessing: channel ", c, " has mean ", mean[size_t(c)], " and std ", sd[size_t(c)],
          " (std must be non-zero)");
    // torchvision: ToTensor's x / 255, then Normalize's (x - mean) / std, each rounded to float.
    for (int v = 0; v < 256; ++v)
      lut_[size_t(c) * 256 + size_t(v)] = (float(v) / 255.0f - mean[size_t(c)]) / sd[size_t(c)];
  }
}

bool Transform::random() const {
  return spec_.hflip || spec_.geometry == Geometry::RandomResizedCrop ||
         spec_.geometry == Geometry::PadRandomCrop;
}

Placement Transform::place(int h, int w, uint64_t epoch, uint64_t index, std::string_view sample) const {
  const Preprocess& s = spec_;
  const SampleName name{sample, index};
  CHECK(h > 0 && w > 0, name, ": empty image (", h, "x", w, ")");
  const Rng rng(s.seed, kAugmentStream + epoch);
  const uint64_t base = index * kDrawsPerSample;
  Placement p;
  p.src_height = p.resized_height = h;
  p.src_width = p.resized_width = w;
  switch (s.geometry) {
    case Geometry::None:
      CHECK(h == s.height && w == s.width, name, ": image is ", h, "x", w, ", expected ", s.height, "x",
            s.width, " (no resize or crop is configured)");
      break;
    case Geometry::Resize:
      p.resized_height = s.height, p.resized_width = s.width;
      break;
    case Geometry::ResizeCenterCrop:
      if (s.resize > 0) std::tie(p.resized_height, p.resized_width) = resized_shorter_size(h, w, s.resize);
      std::tie(p.top, p.left) = center_crop_origin(p.resized_height, p.resized_width, s.height, s.width);
      break;
    case Geometry::RandomResizedCrop: {
      // torchvision 0.14 RandomResizedCrop.get_params: 10 tries, then a central crop.
      const double area = double(h) * w;
      const double log_lo = std::log(s.ratio_min), log_hi = std::log(s.ratio_max);
      bool found = false;
      for (uint64_t a = 0; a < 10 && !found; ++a) {
        const uint64_t d = base + 4 * a;
        const double target = area * (s.scale_min + (s.scale_max - s.scale_min) * rng.uniform(d));
        const double aspect = std::exp(log_lo + (log_hi - log_lo) * rng.uniform(d + 1));
        const int cw = int(std::nearbyint(std::sqrt(target * aspect)));  // Python round: half even
        const int ch = int(std::nearbyint(std::sqrt(target / aspect)));
        if (0 < cw && cw <= w && 0 < ch && ch <= h) {
          p.src_top = int(rng.below(d + 2, uint64_t(h - ch + 1)));
          p.src_left = int(rng.below(d + 3, uint64_t(w - cw + 1)));
          p.src_height = ch, p.src_width = cw;
          found = true;
        }
      }
      if (!found) {
        const double in_ratio = double(w) / double(h);
        int cw = w, ch = h;
        if (in_ratio < s.ratio_min)
          ch = std::max(1, int(std::nearbyint(cw / s.ratio_min)));
        else if (in_ratio > s.ratio_max)
          cw = std::max(1, int(std::nearbyint(ch * s.ratio_max)));
        p.src_top = (h - ch) / 2, p.src_left = (w - cw) / 2;
        p.src_height = ch, p.src_width = cw;
      }
      p.resized_height = s.height, p.resized_width = s.width;
      break;
    }
    case Geometry::PadRandomCrop: {
      const int ph = h + 2 * s.padding, pw = w + 2 * s.padding;
      CHECK(ph >= s.height && pw >= s.width, name, ": image is ", h, "x", w, "; with padding ", s.padding,
            " it is smaller than the ", s.height, "x", s.width, " crop");
      p.top = int(rng.below(base, uint64_t(ph - s.height + 1))) - s.padding;
      p.left = int(rng.below(base + 1, uint64_t(pw - s.width + 1))) - s.padding;
      break;
    }
  }
  p.flip = s.hflip && rng.uniform(base + kFlipDraw) < 0.5f;
  return p;
}

namespace {
// Writes one row segment into the (C, H, W) output through the lookup table: channel c of
// input pixel i (interleaved: line[i * CI + c], planar: line[c * n + i]) goes to plane c,
// column x + i (mirrored when flipping). CI = 1 and CO = 3 replicates gray.
template <int CI, int CO, bool FLIP>
void write_row(float* out, const float* lut, int height, int width, int y, int x, int n,
               const uint8_t* line, bool planar) {
  const std::size_t plane = std::size_t(height) * width;
  for (int c = 0; c < CO; ++c) {
    const float* t = lut + c * 256;
    float* o = out + c * plane + std::size_t(y) * width + (FLIP ? width - 1 - x : x);
    const uint8_t* l = line + (CI == 1 ? 0 : planar ? c * n : c);
    constexpr int d = FLIP ? -1 : 1;
    if (planar || CI == 1)  // compile-time strides in both loops
      for (int i = 0; i < n; ++i) o[d * i] = t[l[i]];
    else
      for (int i = 0; i < n; ++i) o[d * i] = t[l[i * CI]];
  }
}
}  // namespace

void Transform::render(float* out, const Image& img, const Placement& p) const {
  const int H = spec_.height, W = spec_.width, C = spec_.channels;
  check_placement(img, p, H, W);
  CHECK(img.channels == C || img.channels == 1, "render: a ", img.channels,
        "-channel image for a ", C, "-channel model (convert it first)");
  // Zeros (before normalization) everywhere the window leaves the resized region; the resample
  // overwrites the rest. Cheap next to the resample, and simpler than tracking the border.
  const std::size_t plane = std::size_t(H) * W;
  const bool full =
      p.top >= 0 && p.left >= 0 && p.top + H <= p.resized_height && p.left + W <= p.resized_width;
  if (!full)
    for (int c = 0; c < C; ++c) std::fill(out + c * plane, out + (c + 1) * plane, lut_[size_t(c) * 256]);
  const float* lut = lut_.data();
  auto run = [&](auto write) {
    resample(img, p, H, W, [&](int y, int x, int n, const uint8_t* line, bool planar) {
      write(out, lut, H, W, y, x, n, line, planar);
    });
  };
  if (img.channels == 1 && C == 1)
    p.flip ? run(write_row<1, 1, true>) : run(write_row<1, 1, false>);
  else if (img.channels == 1)
    p.flip ? run(write_row<1, 3, true>) : run(write_row<1, 3, false>);
  else
    p.flip ? run(write_row<3, 3, true>) : run(write_row<3, 3, false>);
}

namespace {
// The image apply() places: `img`, or its luma for a 1-channel model (PIL converts to L before
// any resize; luma does not commute with resampling), in per-thread scratch.
const Image& model_channels(const Image& img, int channels, uint64_t index, std::string_view name) {
  CHECK(img.channels == 1 || img.channels == 3, SampleName{name, index}, ": image has ", img.channels,
        " channels");
  if (img.channels == 3 && channels == 1) {
    Image& gray = scratch().converted;
    convert_channels(gray, img, 1);
    return gray;
  }
  return img;
}
}  // namespace

void Transform::apply(float* out, const Image& img, uint64_t epoch, uint64_t index,
                      std::string_view name) const {
  const Image& src = model_channels(img, spec_.channels, index, name);
  render(out, src, place(src.height, src.width, epoch, index, name));
}

Image Transform::geometry(const Image& img, uint64_t epoch, uint64_t index, std::string_view name) const {
  const Image& src = model_channels(img, spec_.channels, index, name);
  const Placement p = place(src.height, src.width, epoch, index, name);
  Image out = resample_image(src, p, spec_.height, spec_.width);
  if (p.flip) {
    const int C = out.channels;
    for (int y = 0; y < out.height; ++y) {
      uint8_t* r = out.row(y);
      for (int a = 0, b = out.width - 1; a < b; ++a, --b)
        for (int c = 0; c < C; ++c) std::swap(r[a * C + c], r[b * C + c]);
    }
  }
  return out;
}

bool Transform::window(uint8_t* out, const Image& img, uint64_t epoch, uint64_t index,
                       std::string_view name) const {
  const Image& src = model_channels(img, spec_.channels, index, name);
  const Placement p = place(src.height, src.width, epoch, index, name);
  const int H = spec_.height, W = spec_.width, C = spec_.channels, CI = src.channels;
  check_placement(src, p, H, W);
  if (p.top < 0 || p.left < 0 || p.top + H > p.resized_height || p.left + W > p.resized_width)
    std::memset(out, 0, std::size_t(H) * W * C);  // the window leaves the resized region
  resample(src, p, H, W, [&](int y, int x, int n, const uint8_t* line, bool planar) {
    uint8_t* o = out + (std::size_t(y) * W + x) * C;
    if (CI == C && (!planar || C == 1)) {
      std::memcpy(o, line, std::size_t(n) * C);
      return;
    }
    for (int i = 0; i < n; ++i)
      for (int c = 0; c < C; ++c) o[i * C + c] = line[CI == 1 ? i : planar ? c * n + i : i * CI + c];
  });
  return p.flip;
}

void Transform::normalize(float* out, const Image& window) const {
  CHECK(window.height == spec_.height && window.width == spec_.width, "normalize: a ", window.height,
        "x", window.width, " window for a ", spec_.height, "x", spec_.width, " model input");
  render(out, window, whole(window));
}

}  // namespace mpicnn::data
