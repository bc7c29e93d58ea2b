// The direct convolution's bf16 kernels emulated in AVX-512F, for CPUs with AVX-512 but no
// AVX512-BF16: the native copy (conv_direct_avx512bf16.cpp: its layout, packing and passes)
// with each vdpbf16ps done as core/cpu/bf16_avx512f.h emulates it (a pair split into two
// floats, two vfmadd), each tile's and weight-gradient unit's sums under DAZ and flushed before
// they are stored: the same bits as the native kernels, at about the fp32 kernels' speed.
// Compiled with the AVX-512F/BW/VL flags (Makefile); conv_direct.cpp calls it only on a CPU
// with them.
#define MPICNN_DIRECT_NS direct_bf16_avx512f
#define MPICNN_DIRECT_PAIRS 1
#include "core/cpu/bf16_avx512f.h"
#include "layers/cpu/conv_direct_avx512_isa.h"

namespace mpicnn::direct::direct_bf16_avx512f {
struct Isa : Avx512PairsIsa {
  static constexpr const char* kName = "avx512bf16-emulated";
  // Tiles of up to 24 accumulators: with a weight vector's two halves per output block and a
  // broadcast's two, 28 left too few of the 32 registers (accumulators spilled in the tap loop;
  // with 24, ResNet-18's stride-1 3x3 forward ran at 0.73-0.77x fp32 direct, against 0.56-0.72x:
  // bench/conv_bench --bf16 1).
  static constexpr int kMaxTile = 24;
  using Rounding = bf16k::EmulatedRounding;
  static Vec fma(Vec pairs, Vec w, Vec acc) {
    return bf16k::dot_pairs(_mm512_castps_si512(pairs), _mm512_castps_si512(w), acc);
  }
  template <class A>
  static unsigned begin_sums(A& acc) {
    return bf16k::daz_on(acc);
  }
  template <class A>
  static void end_sums(A& acc, unsigned csr) {
    bf16k::daz_off(acc, csr);
  }
};
}  // namespace mpicnn::direct::direct_bf16_avx512f

#include "layers/cpu/conv_direct_impl.h"
#include "layers/cpu/conv_direct_pairs.h"

namespace mpicnn::direct {
const Kernels* bf16_avx512f_kernels() { return &direct_bf16_avx512f::kKernels; }
}  // namespace mpicnn::direct
