// The bf16 GEMM's emulated kernels in AVX-512F, for CPUs with AVX-512 but no AVX512-BF16
// (Skylake-SP, Cascade Lake and Ice Lake Xeons): the same bits as the instruction and as the
// scalar definition (gemm_bf16_emulated.cpp), at a large share of the fp32 GEMM's speed.
// - Rounding: vcvtne2ps2bf16's rule (bf16k::round_bf16) in integer arithmetic, 16 lanes at a
//   time; packing as the native kernels pack (gemm_bf16_avx512_common.h).
// - Micro-kernel: the native 8 x 48 tile; each bf16 pair split into its two floats by a shift
//   and a mask, and vdpbf16ps's step (dot_pair: the odd product, then the even, each one fused
//   multiply-add) as two vfmadd. The instruction flushes each step's subnormal result to zero;
//   here the K loop runs with MXCSR's DAZ set, so the next step reads such a result as a zero
//   of its sign, as if flushed (and bf16 subnormal inputs as zeros, as the instruction does),
//   and the tile's sums are flushed once at the end. MXCSR is restored before C is written.
// Compiled with the AVX-512F/BW/VL flags on any x86-64 build machine (Makefile);
// core/gemm_bf16.cpp calls them only on a CPU that has them.
#include <cfloat>

#include "core/cpu/avx512_lanes.h"
#include "core/cpu/gemm_bf16_avx512_common.h"

namespace mpicnn::bf16k {

namespace {

static_assert(NR == 48 && MR == 8, "the micro-kernel below is written for an 8 x 48 tile");

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

struct Rounding {
  // As core/cpu/bf16_avx512.h's round_32.
  static __m512i round_32(const float* p, int n) {
    const __m256i lo = _mm512_cvtepi32_epi16(round_16(_mm512_maskz_loadu_ps(first_lanes(n), p)));
    const __m256i hi =
        _mm512_cvtepi32_epi16(round_16(_mm512_maskz_loadu_ps(first_lanes(n - 16), p + 16)));
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
  }
  // As core/cpu/bf16_avx512.h's round_pairs.
  static __m512i round_pairs(__m512 even, __m512 odd) {
    return _mm512_or_si512(round_16(even), _mm512_slli_epi32(round_16(odd), 16));
  }
};
using Packing = Avx512Packing<Rounding>;

// A lane of pairs (even element in the low half) as its two floats.
__m512 odd_of(__m512i pairs) {
  return _mm512_castsi512_ps(_mm512_and_si512(pairs, _mm512_set1_epi32(int(0xFFFF0000u))));
}
__m512 even_of(__m512i pairs) { return _mm512_castsi512_ps(_mm512_slli_epi32(pairs, 16)); }

// Keeps the compiler from moving the tile's arithmetic across an MXCSR write: each accumulator
// passes through an empty volatile asm, ordered with the (volatile) MXCSR writes.
template <int NV>
void fence(__m512 (&c)[MR][NV]) {
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < NV; ++v) asm volatile("" : "+v"(c[i][v]));
}

template <int NV>
void micro_nv(const bf16_t* a, const bf16_t* b, int64_t kpairs, const Tile& t) {
  constexpr unsigned kDaz = 0x0040;
  const unsigned csr = _mm_getcsr();
  __m512 c[MR][NV];
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < NV; ++v) c[i][v] = _mm512_setzero_ps();
  _mm_setcsr(csr | kDaz);
  fence(c);
  for (int64_t kp = 0; kp < kpairs; ++kp, a += 2 * MR, b += 32 * NV) {
    __m512 b0[NV], b1[NV];
    for (int v = 0; v < NV; ++v) {
      const __m512i w = _mm512_loadu_si512(b + 32 * v);
      b0[v] = even_of(w);
      b1[v] = odd_of(w);
    }
    for (int i = 0; i < MR; ++i) {
      int32_t pair;
      __builtin_memcpy(&pair, a + 2 * i, sizeof pair);
      const __m512i w = _mm512_set1_epi32(pair);
      const __m512 a0 = even_of(w), a1 = odd_of(w);
      for (int v = 0; v < NV; ++v)
        c[i][v] = _mm512_fmadd_ps(a0, b0[v], _mm512_fmadd_ps(a1, b1[v], c[i][v]));
    }
  }
  fence(c);
  _mm_setcsr(csr);
  fence(c);
  const __m512 min_normal = _mm512_set1_ps(FLT_MIN);
  const __m512i sign = _mm512_set1_epi32(int(0x80000000u));
  for (int i = 0; i < MR && i < t.rows; ++i)
    for (int v = 0; v < NV; ++v) {
      // flush_subnormal: |x| < FLT_MIN becomes a zero of x's sign.
      const __mmask16 tiny =
          _mm512_cmp_ps_mask(_mm512_abs_ps(c[i][v]), min_normal, _CMP_LT_OQ);
      const __m512 sum = _mm512_castsi512_ps(_mm512_mask_and_epi32(
          _mm512_castps_si512(c[i][v]), tiny, _mm512_castps_si512(c[i][v]), sign));
      store_16(t.c + i * t.ldc + 16 * v, sum, t.cols - 16 * v, t);
    }
}

void micro(const bf16_t* a, const bf16_t* b, int64_t kpairs, int nv, const Tile& t) {
  if (nv == 3) return micro_nv<3>(a, b, kpairs, t);
  if (nv == 2) return micro_nv<2>(a, b, kpairs, t);
  micro_nv<1>(a, b, kpairs, t);
}

constexpr Kernels kKernels{"emulated in AVX-512F, about fp32's speed", micro, Packing::pack_f32,
                           Packing::round};

}  // namespace

const Kernels* emulated_avx512_kernels() { return &kKernels; }

}  // namespace mpicnn::bf16k
