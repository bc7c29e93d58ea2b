// AVX-512 BF16 building blocks shared by the bf16 GEMM's kernels (core/cpu/gemm_bf16_avx512.cpp)
// and the bf16 direct convolution's (layers/cpu/conv_direct_avx512bf16.cpp): rounding by the
// instruction (vcvtne2ps2bf16: nearest even, as bf16_round in core/cpu/gemm_bf16_kernels.h, bit
// for bit) and interleaving into the pairs vdpbf16ps reads. Include only from files compiled
// with the AVX-512 BF16 flags (Makefile); `static inline`, so that no other file's copy can be
// mixed up with them at link time.
#pragma once
#include "core/cpu/avx512_lanes.h"

namespace mpicnn::bf16k {

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

// The rounding policy of the shared packing code (gemm_bf16_avx512_common.h,
// layers/cpu/conv_direct_pairs.h); core/cpu/bf16_avx512f.h's EmulatedRounding gives the same bits.
// (An anonymous namespace: internal linkage, as the functions above.)
namespace {
struct NativeRounding {
  static __m512i round_32(const float* p, int n) { return bf16k::round_32(p, n); }
  static __m512i round_pairs(__m512 even, __m512 odd) { return bf16k::round_pairs(even, odd); }
};
}  // namespace

}  // namespace mpicnn::bf16k
