// The direct convolution's bf16 kernels (AVX512-BF16): the AVX-512 copy's passes
// (conv_direct_impl.h) with vdpbf16ps for the FMA, on inputs and weights packed as bf16 pairs.
// An input block is 32 channels stored as 16 pairs per pixel, [C/32][rows][cols][16][2] bf16
// (16 32-bit words a pixel, as a float block is 16 floats), so one 32-bit broadcast of a pair
// feeds a vdpbf16ps: 32 multiply-adds an instruction where the fp32 FMA does 16. Weights come
// packed [out block][pair block][tap][16 pairs][16 out][2] (conv_direct.cpp); the accumulators,
// the bias and the output are float32 as in the fp32 kernels. Rounding is vcvtne2ps2bf16's
// (nearest even: core/gemm_bf16.h's bf16_round, bit for bit). The weight gradient runs the same
// loops as float32's on pixel pairs (conv_direct_pairs.h's pack_pixel_pairs: two pixels of one
// channel a word, so each vdpbf16ps sums two pixels' products into float32 dw). Compiled with
// the AVX-512 BF16 flags (Makefile); conv_direct.cpp calls it only on a CPU with avx512_bf16.
#define MPICNN_DIRECT_NS direct_avx512bf16
#define MPICNN_DIRECT_PAIRS 1
#include "core/cpu/bf16_avx512.h"
#include "layers/cpu/conv_direct_avx512_isa.h"

namespace mpicnn::direct::direct_avx512bf16 {
// vdpbf16ps: the odd element's product first, then the even's, each added in float32 with one
// rounding.
struct Isa : Avx512PairsIsa {
  static constexpr const char* kName = "avx512bf16";
  using Rounding = bf16k::NativeRounding;
  static Vec fma(Vec pairs, Vec w, Vec acc) {
    return _mm512_dpbf16_ps(acc, (__m512bh)_mm512_castps_si512(pairs),
                            (__m512bh)_mm512_castps_si512(w));
  }
};
}  // namespace mpicnn::direct::direct_avx512bf16

#include "layers/cpu/conv_direct_impl.h"
#include "layers/cpu/conv_direct_pairs.h"

namespace mpicnn::direct {
const Kernels* avx512bf16_kernels() { return &direct_avx512bf16::kKernels; }
}  // namespace mpicnn::direct
