// The AVX-512 (VBMI + VNNI) kernels of the PIL resampler: horizontal and vertical passes 16
// outputs at a time with exact integer sums, so their bytes equal the scalar loops'. Compiled
// empty where the CPU lacks those extensions (resample_detail.h decides); not the taps' maths
// nor the pass scheduling, which stay in resample.cpp.
#include "data/resample_detail.h"

#ifdef MPICNN_HPASS_SIMD
// GCC 12 reports its own _mm512_undefined_* helpers as maybe-uninitialized once inlined.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

namespace mpicnn::data::resample_detail {

void group_taps_avx512(Taps& t, int count, int C) {
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
}

namespace {

template <int C>
void hpass_row(uint8_t* out, const uint8_t* in, std::size_t avail, const Taps& t, int count) {
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
}

}  // namespace

void hpass_row_avx512(uint8_t* out, const uint8_t* in, std::size_t avail, const Taps& t, int count, int C) {
  if (C == 1)
    hpass_row<1>(out, in, avail, t, count);
  else
    hpass_row<3>(out, in, avail, t, count);
}

int vpass_row_avx512(uint8_t* out, const uint8_t* in, std::size_t stride, const int32_t* k, int ksize, int n) {
  // 16 outputs at a time with the pair trick of hpass_row: rows 2q and 2q+1 interleaved as
  // 16-bit pairs, weights split into high and low 11 bits; exact integer sums as PIL's.
  constexpr int kMaxPairs = 8;
  const int pairs = (ksize + 1) / 2;
  if (pairs > kMaxPairs) return 0;
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
  int x0 = 0;
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
  return x0;
}

}  // namespace mpicnn::data::resample_detail

#endif  // MPICNN_HPASS_SIMD
