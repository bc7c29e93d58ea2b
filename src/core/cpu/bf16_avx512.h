// AVX-512 BF16 building blocks shared by the bf16 GEMM's kernels (core/cpu/gemm_bf16_avx512.cpp)
// and the bf16 direct convolution's (layers/cpu/conv_direct_avx512bf16.cpp): rounding by the
// instruction (vcvtne2ps2bf16: nearest even, as bf16_round in core/cpu/gemm_bf16_kernels.h, bit
// for bit), interleaving into the pairs vdpbf16ps reads, and a 16 x 16 transpose of 32-bit
// lanes. Include only from files compiled with the AVX-512 BF16 flags (Makefile); `static
// inline`, so that no other file's copy can be mixed up with them at link time.
#pragma once
// GCC 12's AVX-512 intrinsics trip -W(maybe-)uninitialized inside its own header (GCC bug
// 105593, see layers/cpu/conv_direct_avx512.cpp): silenced for that header only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#ifndef __clang__
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#pragma GCC diagnostic pop

namespace mpicnn::bf16k {

static inline __mmask16 first_lanes(int n) {  // n clamped to [0, 16]
  return n <= 0 ? __mmask16(0) : n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1);
}

// 32 floats (lo = p[0, 16), hi = p[16, 32), lanes past n read as zero) as 32 bf16 in order,
// or equally 16 pairs (p[2d], p[2d + 1]) as 32-bit lanes d.
static inline __m512i round_32(const float* p, int n) {
  const __m512 lo = _mm512_maskz_loadu_ps(first_lanes(n), p);
  const __m512 hi = _mm512_maskz_loadu_ps(first_lanes(n - 16), p + 16);
  return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
}

// Lane d of the result is the pair (even[d], odd[d]) rounded to bf16: even in the low half,
// as vdpbf16ps pairs it with the low half of the other operand's lane.
static inline __m512i round_pairs(__m512 even, __m512 odd) {
  const __m512i interleave = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10,
                                              25, 9, 24, 8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3,
                                              18, 2, 17, 1, 16, 0);
  const __m512i halves = (__m512i)_mm512_cvtne2ps_pbh(odd, even);  // even's 16, then odd's 16
  return _mm512_permutexvar_epi16(interleave, halves);
}

// r[i] lane l becomes r[l] lane i (16 x 16 32-bit lanes): 4 rounds of shuffles.
static inline void transpose16(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    r[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int h = 0; h < 2; ++h)
    for (int j = 0; j < 4; ++j) {
      t[8 * h + j] = _mm512_shuffle_i32x4(r[8 * h + j], r[8 * h + 4 + j], 0x88);
      t[8 * h + 4 + j] = _mm512_shuffle_i32x4(r[8 * h + j], r[8 * h + 4 + j], 0xdd);
    }
  for (int j = 0; j < 8; ++j) {
    r[j] = _mm512_shuffle_i32x4(t[j], t[8 + j], 0x88);
    r[8 + j] = _mm512_shuffle_i32x4(t[j], t[8 + j], 0xdd);
  }
}

}  // namespace mpicnn::bf16k
