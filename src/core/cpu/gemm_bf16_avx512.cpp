// The bf16 GEMM's AVX512-BF16 kernels: an 8 x 48 register tile (24 accumulators; 8 x 16 or
// 8 x 32 for a narrow last panel) of vdpbf16ps, and packing (gemm_bf16_avx512_common.h) that
// rounds 32 floats per vcvtne2ps2bf16. Compiled with the AVX-512 BF16 flags on any x86-64 build
// machine (Makefile); core/gemm_bf16.cpp calls them only on a CPU that has avx512_bf16.
#include <cstring>

#include "core/cpu/bf16_avx512.h"
#include "core/cpu/gemm_bf16_avx512_common.h"

namespace mpicnn::bf16k {

namespace {

static_assert(NR == 48 && MR == 8, "the micro-kernel below is written for an 8 x 48 tile");

__m512bh as_bh(__m512i v) { return (__m512bh)v; }

// Both bf16 of a pair as one 32-bit lane, broadcast to all 16 lanes.
__m512bh broadcast_pair(const bf16_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof v);
  return as_bh(_mm512_set1_epi32(v));
}

// The tile's NV vectors of 16 columns per row; NV = 3 (48 columns) but in a narrow last panel.
template <int NV>
void micro_nv(const bf16_t* a, const bf16_t* b, int64_t kpairs, const Tile& t) {
  __m512 c[MR][NV];
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < NV; ++v) c[i][v] = _mm512_setzero_ps();
  for (int64_t kp = 0; kp < kpairs; ++kp, a += 2 * MR, b += 32 * NV) {
    __m512bh bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = as_bh(_mm512_loadu_si512(b + 32 * v));
    for (int i = 0; i < MR; ++i) {
      const __m512bh ai = broadcast_pair(a + 2 * i);
      for (int v = 0; v < NV; ++v) c[i][v] = _mm512_dpbf16_ps(c[i][v], ai, bv[v]);
    }
  }
  for (int i = 0; i < MR && i < t.rows; ++i)
    for (int v = 0; v < NV; ++v) store_16(t.c + i * t.ldc + 16 * v, c[i][v], t.cols - 16 * v, t);
}

void micro(const bf16_t* a, const bf16_t* b, int64_t kpairs, int nv, const Tile& t) {
  if (nv == 3) return micro_nv<3>(a, b, kpairs, t);
  if (nv == 2) return micro_nv<2>(a, b, kpairs, t);
  micro_nv<1>(a, b, kpairs, t);
}

// Packing and rounding with the instruction's rounding (core/cpu/bf16_avx512.h).
using Packing = Avx512Packing<NativeRounding>;

constexpr Kernels kKernels{"AVX512-BF16", micro, Packing::pack_f32, Packing::round};

}  // namespace

const Kernels* native_kernels() { return &kKernels; }

}  // namespace mpicnn::bf16k
