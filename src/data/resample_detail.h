// Internal to the resampler (resample.cpp, resample_avx512.cpp): PIL's fixed-point taps, the
// scalar horizontal kernel both files run, and the AVX-512 kernels' entry points. Not an API:
// callers use resample.h.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

// The SIMD passes need byte permutes across two registers (VBMI) and 16-bit dot products
// (VNNI): Ice Lake, Sapphire Rapids, Zen 4. Elsewhere the plain loops run. Every file that
// sees Taps must agree on this (its layout depends on it): they all take it from here.
#if defined(__AVX512VBMI__) && defined(__AVX512VNNI__)
#define MPICNN_HPASS_SIMD 1
#endif

namespace mpicnn::data::resample_detail {

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
  // one output per 32-bit lane, taps in pairs (see hpass_row_avx512).
  struct Group {
    int first, count, start;
  };
  int pairs = 0;               // ceil(ksize / 2)
  std::vector<Group> groups;
  std::vector<uint8_t> index;  // (groups, pairs, C, 64) byte permutes: lane i = [tap 2q, 0, tap 2q+1, 0]
  std::vector<int16_t> kw;     // (groups, pairs, 2, 32): weight pairs by lane, high then low 11 bits
#endif
};

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

#ifdef MPICNN_HPASS_SIMD
// resample_avx512.cpp. The permutes and weight pairs of a horizontal pass over C interleaved
// channels, from t.start and t.k (called by pil_taps once they are set).
void group_taps_avx512(Taps& t, int count, int C);
// hpass_scalar's result for the whole row (C = 1 or 3), 16 outputs at a time; `in` holds
// `avail` bytes of the row from the start of the region.
void hpass_row_avx512(uint8_t* out, const uint8_t* in, std::size_t avail, const Taps& t, int count, int C);
// The first columns of one vertical-pass output row, 16 at a time (none when the window is
// longer than 16 rows); returns how many it wrote, the scalar loop does the rest.
int vpass_row_avx512(uint8_t* out, const uint8_t* in, std::size_t stride, const int32_t* k, int ksize, int n);
#endif

}  // namespace mpicnn::data::resample_detail
