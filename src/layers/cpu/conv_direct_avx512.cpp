// The direct convolution's AVX-512 kernels: 16 channels per block, up to 28 accumulators a tile
// of the 32 vector registers. Compiled with AVX-512 flags on any x86-64 build machine (Makefile);
// conv_direct.cpp calls them only on a CPU that has AVX-512F.
#include <immintrin.h>

#include "layers/cpu/conv_direct_kernels.h"

namespace mpicnn::direct::direct_avx512 {
struct Isa {
  static constexpr const char* kName = "avx512";
  static constexpr int V = 16;
  static constexpr int kMaxTile = 28;
  using Vec = __m512;
  static Vec zero() { return _mm512_setzero_ps(); }
  static Vec load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, Vec v) { _mm512_storeu_ps(p, v); }
  static Vec bcast(const float* p) { return _mm512_set1_ps(*p); }
  static Vec fma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
};
}  // namespace mpicnn::direct::direct_avx512

#define MPICNN_DIRECT_NS direct_avx512
#include "layers/cpu/conv_direct_impl.h"

namespace mpicnn::direct {
const Kernels* avx512_kernels() { return &direct_avx512::kKernels; }
}  // namespace mpicnn::direct
