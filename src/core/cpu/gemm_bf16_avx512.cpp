// The bf16 GEMM's AVX512-BF16 kernels: an 8 x 48 register tile (24 accumulators; 8 x 16 or
// 8 x 32 for a narrow last panel) of vdpbf16ps, and packing that rounds 32 floats per
// vcvtne2ps2bf16 (both written in gemm_bf16_avx512_common.h). Compiled with the AVX-512 BF16
// flags on any x86-64 build machine (Makefile); core/gemm_bf16.cpp calls them only on a CPU that
// has avx512_bf16.
#include "core/cpu/bf16_avx512.h"
#include "core/cpu/gemm_bf16_avx512_common.h"

namespace mpicnn::bf16k {

namespace {

// One step: vdpbf16ps itself.
struct Native {
  template <class A>
  static unsigned begin_sums(A&) {
    return 0;
  }
  template <class A>
  static void end_sums(A&, unsigned) {}
  static __m512 dot(__m512i a, __m512i b, __m512 acc) {
    return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b);
  }
};

// Packing and rounding with the instruction's rounding (core/cpu/bf16_avx512.h).
using Packing = Avx512Packing<NativeRounding>;

constexpr Kernels kKernels{"AVX512-BF16", Avx512Micro<Native>::micro, Packing::pack_f32,
                           Packing::round};

}  // namespace

const Kernels* native_kernels() { return &kKernels; }

}  // namespace mpicnn::bf16k
