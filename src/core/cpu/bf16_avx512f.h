// vdpbf16ps and vcvtne2ps2bf16 emulated in AVX-512F, for CPUs with AVX-512 but no AVX512-BF16
// (Skylake-SP, Cascade Lake and Ice Lake Xeons): the same bits as the instructions. Shared by
// the bf16 GEMM's emulated kernels (core/cpu/gemm_bf16_avx512f.cpp) and the direct
// convolution's (layers/cpu/conv_direct_bf16_avx512f.cpp).
// - Rounding: the instruction's rule (bf16k::round_bf16: nearest even, subnormals to zeros of
//   their sign, NaN quiet) in integer arithmetic, 16 lanes at a time.
// - A step of vdpbf16ps: each bf16 pair split into its two floats (a shift, a mask), the odd
//   product then the even added by one vfmadd each (a product of two bf16 is exact in float32,
//   so each is one rounded add). The instruction flushes each step's subnormal result to zero
//   and reads subnormal inputs as zeros: a run of steps goes between daz_on() and daz_off(), so
//   that the next step reads such a result as a zero of its sign, as if flushed (and bf16
//   subnormal inputs as zeros), and its sums are flushed once at the end (flush_subnormal).
//   fence() keeps the compiler from moving the arithmetic across the MXCSR writes.
// Include only from files compiled with AVX-512F/BW/VL and FMA (Makefile); internal linkage, so
// that no other file's copy can be mixed up with them at link time.
#pragma once
#include <cfloat>

#include "core/cpu/avx512_lanes.h"

namespace mpicnn::bf16k {
namespace {

// 16 floats rounded as round_bf16, each bf16 in the low half of its 32-bit lane.
__m512i round_16(__m512 f) {
  const __m512i x = _mm512_castps_si512(f), high = _mm512_srli_epi32(x, 16);
  const __m512i lsb = _mm512_and_si512(high, _mm512_set1_epi32(1));
  __m512i r = _mm512_srli_epi32(
      _mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7FFF)), lsb), 16);
  const __mmask16 subnormal_or_zero = _mm512_testn_epi32_mask(x, _mm512_set1_epi32(0x7F800000));
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7FFFFFFF)),
                                                _mm512_set1_epi32(0x7F800000));
  r = _mm512_mask_and_epi32(r, subnormal_or_zero, high, _mm512_set1_epi32(0x8000));
  return _mm512_mask_or_epi32(r, nan, high, _mm512_set1_epi32(0x0040));
}

// core/cpu/bf16_avx512.h's NativeRounding, in integer arithmetic: the same bits.
struct EmulatedRounding {
  static __m512i round_32(const float* p, int n) {
    const __m256i lo = _mm512_cvtepi32_epi16(round_16(_mm512_maskz_loadu_ps(first_lanes(n), p)));
    const __m256i hi =
        _mm512_cvtepi32_epi16(round_16(_mm512_maskz_loadu_ps(first_lanes(n - 16), p + 16)));
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
  }
  static __m512i round_pairs(__m512 even, __m512 odd) {
    return _mm512_or_si512(round_16(even), _mm512_slli_epi32(round_16(odd), 16));
  }
};

// One vdpbf16ps step on split pairs (odd_of, even_of): acc + x_odd * y_odd, then
// + x_even * y_even (under daz_on(), see above).
__m512 dot_split(__m512 x_odd, __m512 x_even, __m512 y_odd, __m512 y_even, __m512 acc) {
  return _mm512_fmadd_ps(x_even, y_even, _mm512_fmadd_ps(x_odd, y_odd, acc));
}

// |x| < FLT_MIN becomes a zero of x's sign.
__m512 flush_subnormal(__m512 x) {
  const __mmask16 tiny = _mm512_cmp_ps_mask(_mm512_abs_ps(x), _mm512_set1_ps(FLT_MIN), _CMP_LT_OQ);
  return _mm512_castsi512_ps(_mm512_mask_and_epi32(
      _mm512_castps_si512(x), tiny, _mm512_castps_si512(x), _mm512_set1_epi32(int(0x80000000u))));
}

// Each vector of acc (an array of arrays of __m512) passes through an empty volatile asm,
// ordered with the (volatile) MXCSR writes: the arithmetic that makes or reads acc stays on
// its side of them.
template <class A>
void fence(A& acc) {
  for (auto& row : acc)
    for (auto& v : row) asm volatile("" : "+v"(v));
}

// MXCSR with DAZ set, fenced (above); returns the MXCSR to restore.
template <class A>
unsigned daz_on(A& acc) {
  constexpr unsigned kDaz = 0x0040;
  const unsigned csr = _mm_getcsr();
  _mm_setcsr(csr | kDaz);
  fence(acc);
  return csr;
}

// MXCSR restored to csr (fenced), then every sum of acc flushed.
template <class A>
void daz_off(A& acc, unsigned csr) {
  fence(acc);
  _mm_setcsr(csr);
  fence(acc);
  for (auto& row : acc)
    for (auto& v : row) v = flush_subnormal(v);
}

}  // namespace
}  // namespace mpicnn::bf16k
