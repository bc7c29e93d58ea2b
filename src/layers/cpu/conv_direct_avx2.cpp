// The direct convolution's AVX2 + FMA kernels: 8 channels per block, up to 12 accumulators a
// tile of the 16 vector registers. Compiled without AVX-512 (Makefile), so that this copy runs
// on CPUs that lack it; conv_direct.cpp calls it on any CPU with AVX2 and FMA.
#include <immintrin.h>

#include "layers/cpu/conv_direct_kernels.h"

namespace mpicnn::direct::direct_avx2 {
struct Isa {
  static constexpr const char* kName = "avx2";
  static constexpr int V = 8;
  static constexpr int kMaxTile = 12;
  using Vec = __m256;
  static Vec zero() { return _mm256_setzero_ps(); }
  static Vec load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, Vec v) { _mm256_storeu_ps(p, v); }
  static Vec bcast(const float* p) { return _mm256_broadcast_ss(p); }
  static Vec fma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
};
}  // namespace mpicnn::direct::direct_avx2

#define MPICNN_DIRECT_NS direct_avx2
#include "layers/cpu/conv_direct_impl.h"

namespace mpicnn::direct {
const Kernels* avx2_kernels() { return &direct_avx2::kKernels; }
}  // namespace mpicnn::direct
