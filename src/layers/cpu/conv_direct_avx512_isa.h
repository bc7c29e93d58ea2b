// The AVX-512 float vector operations of the direct convolution's kernels (conv_direct_impl.h's
// Isa), shared by its fp32 copy (conv_direct_avx512.cpp) and its bf16 copies
// (conv_direct_avx512bf16.cpp, conv_direct_bf16_avx512f.cpp, whose Isa derive from this one).
// Each includer first defines MPICNN_DIRECT_NS, so every copy of these inline functions lives
// in its own namespace, built with its own file's flags.
// GCC 12's own AVX-512 intrinsics (_mm512_undefined_ps's `__m512 __Y = __Y;`, inlined into
// _mm512_unpacklo_ps and friends) trip -W(maybe-)uninitialized: GCC's header, not our code
// (GCC bug 105593), silenced for that header only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <cstdint>

namespace mpicnn::direct::MPICNN_DIRECT_NS {
struct Avx512Isa {
  static constexpr const char* kName = "avx512";
  static constexpr int V = 16;
  static constexpr int kMaxTile = 28;
  static constexpr int kQuadLanes = 6;  // lanes a group of the four-block weight gradient
  using Vec = __m512;
  static Vec zero() { return _mm512_setzero_ps(); }
  static Vec load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, Vec v) { _mm512_storeu_ps(p, v); }
  static Vec bcast(const float* p) { return _mm512_set1_ps(*p); }
  static Vec splat(float f) { return _mm512_set1_ps(f); }
  // The vector operand of an FMA (a tile's weights, the weight gradient's output gradient) as
  // the kernels load it, and bcast above the broadcast one: in float32 a vector and a float;
  // the emulated bf16 copy takes both as split pairs.
  using Operand = Vec;
  static Operand operand(const float* p) { return load(p); }
  static Vec fma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
  static Vec add(Vec a, Vec b) { return _mm512_add_ps(a, b); }
  // Around the sums of a tile or a weight-gradient unit (conv_direct_impl.h): nothing in
  // float32 (the emulated bf16 copy sets DAZ and flushes).
  template <class A>
  static unsigned begin_sums(A&) {
    return 0;
  }
  template <class A>
  static void end_sums(A&, unsigned) {}
  // p[0, n) = v[0, n), n <= 16.
  static void store_first(float* p, Vec v, int n) {
    _mm512_mask_storeu_ps(p, __mmask16(n >= 16 ? 0xFFFF : (1u << n) - 1), v);
  }
  // dst[i * ds + l] = src[l * ss + i] for i, l < 16: 16 loads, 4 rounds of shuffles, 16 stores.
  static void transpose(float* dst, int64_t ds, const float* src, int64_t ss) {
    __m512 r[16], t[16];
    for (int l = 0; l < 16; ++l) r[l] = _mm512_loadu_ps(src + l * ss);
    for (int i = 0; i < 8; ++i) {
      t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
      t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; ++i) {
      const __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]);
      const __m512d c = _mm512_castps_pd(t[4 * i + 2]), d = _mm512_castps_pd(t[4 * i + 3]);
      r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
      r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
      r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
      r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
    for (int h = 0; h < 2; ++h)
      for (int j = 0; j < 4; ++j) {
        t[8 * h + j] = _mm512_shuffle_f32x4(r[8 * h + j], r[8 * h + 4 + j], 0x88);
        t[8 * h + 4 + j] = _mm512_shuffle_f32x4(r[8 * h + j], r[8 * h + 4 + j], 0xdd);
      }
    for (int j = 0; j < 8; ++j) {
      _mm512_storeu_ps(dst + j * ds, _mm512_shuffle_f32x4(t[j], t[8 + j], 0x88));
      _mm512_storeu_ps(dst + (8 + j) * ds, _mm512_shuffle_f32x4(t[j], t[8 + j], 0xdd));
    }
  }
};

// The bf16 copies' vectors (conv_direct_pairs.h): a "float" of the input and the weights
// stands for a bf16 pair, broadcast as 32 bits; each copy brings its fma (a vdpbf16ps step) and
// its Rounding.
struct Avx512PairsIsa : Avx512Isa {
  static constexpr int kLaneWords = 1;  // Kernels::lane_words
  static Vec bcast(const float* p) {
    int32_t v;
    __builtin_memcpy(&v, p, sizeof v);
    return _mm512_castsi512_ps(_mm512_set1_epi32(v));
  }
};
}  // namespace mpicnn::direct::MPICNN_DIRECT_NS
