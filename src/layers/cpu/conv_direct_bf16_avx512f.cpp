// The direct convolution's bf16 kernels emulated in AVX-512F, for CPUs with AVX-512 but no
// AVX512-BF16: the native copy (conv_direct_avx512bf16.cpp: its layout, packing and passes)
// with each vdpbf16ps done as core/cpu/bf16_avx512f.h emulates it (a pair split into two
// floats, two vfmadd), each tile's and weight-gradient unit's sums under DAZ and flushed before
// they are stored: the same bits as the native kernels, at about the fp32 kernels' speed. The
// operand a pass broadcasts comes packed already split (Isa::kLaneWords), the vector operand
// as pairs, split once per load and used by a whole tile row.
// Compiled with the AVX-512F/BW/VL flags (Makefile); conv_direct.cpp calls it only on a CPU
// with them.
#define MPICNN_DIRECT_NS direct_bf16_avx512f
#define MPICNN_DIRECT_PAIRS 1
#include "core/cpu/bf16_avx512f.h"
#include "layers/cpu/conv_direct_avx512_isa.h"

namespace mpicnn::direct::direct_bf16_avx512f {
struct Isa : Avx512PairsIsa {
  static constexpr const char* kName = "avx512bf16-emulated";
  // Tiles of up to 24 accumulators (with 28 and a weight vector's two halves per output block,
  // the tap loop spilled).
  static constexpr int kMaxTile = 24;
  // The four-block weight gradient in groups of 4 lanes: 16 accumulators beside four output-
  // gradient vectors split in eight and two broadcasts (with 6, 34 registers: spills).
  static constexpr int kQuadLanes = 4;
  using Rounding = bf16k::EmulatedRounding;
  // The copies this set broadcasts from hold each pair as its two floats (odd, then even, V
  // words apart: Kernels::lane_words 2), so a broadcast is two plain loads where splitting a
  // broadcast pair took two more vector instructions beside its FMAs (bench/RESULTS.md).
  static constexpr int kLaneWords = 2;
  struct Split {
    Vec odd, even;
  };
  static Split bcast(const float* p) { return {_mm512_set1_ps(p[0]), _mm512_set1_ps(p[V])}; }
  using Operand = Split;
  static Operand operand(const float* p) {
    const __m512i pairs = _mm512_loadu_si512(p);
    return {bf16k::odd_of(pairs), bf16k::even_of(pairs)};
  }
  static Vec fma(Split x, Split w, Vec acc) {
    return bf16k::dot_split(x.odd, x.even, w.odd, w.even, acc);
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
