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

using Packing = Avx512Packing<EmulatedRounding>;

// One step: vdpbf16ps emulated (bf16_avx512f.h), the K loop under DAZ, the sums flushed.
struct Emulated {
  template <class A>
  static unsigned begin_sums(A& c) {
    return daz_on(c);
  }
  template <class A>
  static void end_sums(A& c, unsigned csr) {
    daz_off(c, csr);
  }
  static __m512 dot(__m512i a, __m512i b, __m512 acc) {
    return dot_split(odd_of(a), even_of(a), odd_of(b), even_of(b), acc);
  }
};

constexpr Kernels kKernels{"emulated in AVX-512F, about fp32's speed",
                           Avx512Micro<Emulated>::micro, Packing::pack_f32, Packing::round};

}  // namespace

const Kernels* emulated_avx512_kernels() { return &kKernels; }

}  // namespace mpicnn::bf16k
