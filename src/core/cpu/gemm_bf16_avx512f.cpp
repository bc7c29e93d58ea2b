// The bf16 GEMM's emulated kernels in AVX-512F, for CPUs with AVX-512 but no AVX512-BF16
// (Skylake-SP, Cascade Lake and Ice Lake Xeons): the same bits as the instruction and as the
// scalar definition (gemm_bf16_emulated.cpp), at a large share of the fp32 GEMM's speed.
// - Rounding and vdpbf16ps's steps as core/cpu/bf16_avx512f.h emulates them; packing as the
//   native kernels pack (gemm_bf16_avx512_common.h).
// - Micro-kernel: the native 8 x 48 tile, its K loop under DAZ, its sums flushed before C is
//   written (bf16_avx512f.h).
// Compiled with the AVX-512F/BW/VL flags on any x86-64 build machine (Makefile);
// core/gemm_bf16.cpp calls them only on a CPU that has them.
#include "core/cpu/bf16_avx512f.h"
#include "core/cpu/gemm_bf16_avx512_common.h"

namespace mpicnn::bf16k {

namespace {

static_assert(NR == 48 && MR == 8, "the micro-kernel below is written for an 8 x 48 tile");

using Packing = Avx512Packing<EmulatedRounding>;

template <int NV>
void micro_nv(const bf16_t* a, const bf16_t* b, int64_t kpairs, const Tile& t) {
  __m512 c[MR][NV];
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < NV; ++v) c[i][v] = _mm512_setzero_ps();
  const unsigned csr = daz_on(c);
  for (int64_t kp = 0; kp < kpairs; ++kp, a += 2 * MR, b += 32 * NV) {
    __m512i bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = _mm512_loadu_si512(b + 32 * v);
    for (int i = 0; i < MR; ++i) {
      int32_t pair;
      __builtin_memcpy(&pair, a + 2 * i, sizeof pair);
      const __m512i av = _mm512_set1_epi32(pair);
      for (int v = 0; v < NV; ++v) c[i][v] = dot_pairs(av, bv[v], c[i][v]);
    }
  }
  daz_off(c, csr);
  for (int i = 0; i < MR && i < t.rows; ++i)
    for (int v = 0; v < NV; ++v) store_16(t.c + i * t.ldc + 16 * v, c[i][v], t.cols - 16 * v, t);
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
