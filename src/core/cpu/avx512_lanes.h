// AVX-512F building blocks of the bf16 kernels, native (core/cpu/bf16_avx512.h) and emulated
// (core/cpu/bf16_avx512f.h): masks of the first lanes, a 16 x 16 transpose of 32-bit lanes,
// a lane of bf16 pairs as its two floats. Include only from files compiled with AVX-512 flags
// (Makefile); `static inline`, so that no other file's copy can be mixed up with them at link
// time.
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

// 16 lanes of bf16 pairs (the even element in the low half) as their odd and even floats.
static inline __m512 odd_of(__m512i pairs) {
  return _mm512_castsi512_ps(_mm512_and_si512(pairs, _mm512_set1_epi32(int(0xFFFF0000u))));
}
static inline __m512 even_of(__m512i pairs) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(pairs, 16));
}

}  // namespace mpicnn::bf16k
