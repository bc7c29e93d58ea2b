// The direct convolution's AVX2 + FMA kernels: 8 channels per block, up to 12 accumulators a
// tile of the 16 vector registers. Compiled without AVX-512 (Makefile), so that this copy runs
// on CPUs that lack it; conv_direct.cpp calls it on any CPU with AVX2 and FMA.
#include <immintrin.h>

#include <cstdint>

#include "layers/cpu/conv_direct_kernels.h"

namespace mpicnn::direct::direct_avx2 {
struct Isa {
  static constexpr const char* kName = "avx2";
  static constexpr int V = 8;
  static constexpr int kMaxTile = 12;
  static constexpr int kQuadLanes = 6;  // as Avx512Isa's (the four-block units run on AVX-512 only)
  using Vec = __m256;
  static Vec zero() { return _mm256_setzero_ps(); }
  static Vec load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, Vec v) { _mm256_storeu_ps(p, v); }
  static Vec bcast(const float* p) { return _mm256_broadcast_ss(p); }
  static Vec splat(float f) { return _mm256_set1_ps(f); }
  using Operand = Vec;  // as Avx512Isa's
  static Operand operand(const float* p) { return load(p); }
  static Vec fma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
  static Vec add(Vec a, Vec b) { return _mm256_add_ps(a, b); }
  template <class A>
  static unsigned begin_sums(A&) {  // as Avx512Isa's
    return 0;
  }
  template <class A>
  static void end_sums(A&, unsigned) {}
  // p[0, n) = v[0, n), n <= 8.
  static void store_first(float* p, Vec v, int n) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    _mm256_maskstore_ps(p, _mm256_cmpgt_epi32(_mm256_set1_epi32(n), lane), v);
  }
  // dst[i * ds + l] = src[l * ss + i] for i, l < 8.
  static void transpose(float* dst, int64_t ds, const float* src, int64_t ss) {
    __m256 r[8], t[8];
    for (int l = 0; l < 8; ++l) r[l] = _mm256_loadu_ps(src + l * ss);
    for (int i = 0; i < 4; ++i) {
      t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
      t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int h = 0; h < 2; ++h) {
      r[4 * h] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0x44);
      r[4 * h + 1] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0xEE);
      r[4 * h + 2] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0x44);
      r[4 * h + 3] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0xEE);
    }
    for (int j = 0; j < 4; ++j) {
      _mm256_storeu_ps(dst + j * ds, _mm256_permute2f128_ps(r[j], r[4 + j], 0x20));
      _mm256_storeu_ps(dst + (4 + j) * ds, _mm256_permute2f128_ps(r[j], r[4 + j], 0x31));
    }
  }
};
}  // namespace mpicnn::direct::direct_avx2

#define MPICNN_DIRECT_NS direct_avx2
#include "layers/cpu/conv_direct_impl.h"

namespace mpicnn::direct {
const Kernels* avx2_kernels() { return &direct_avx2::kKernels; }
}  // namespace mpicnn::direct
