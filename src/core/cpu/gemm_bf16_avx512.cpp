// The bf16 GEMM's AVX512-BF16 kernels: an 8 x 48 register tile (24 accumulators; 8 x 16 or
// 8 x 32 for a narrow last panel) of vdpbf16ps, and packing that rounds 32 floats per
// vcvtne2ps2bf16. Compiled with the AVX-512 BF16 flags on any x86-64 build machine (Makefile);
// core/gemm_bf16.cpp calls them only on a CPU that has avx512_bf16. Edges are masked loads and
// stores; an operand with no unit stride falls back to the shared scalar packing
// (gemm_bf16_kernels.h), whose rounding is the instruction's, bit for bit.
#include <cstring>

#include "core/cpu/bf16_avx512.h"
#include "core/cpu/gemm_bf16_kernels.h"

namespace mpicnn::bf16k {

namespace {

static_assert(NR == 48 && MR == 8, "the micro-kernel below is written for an 8 x 48 tile");

__m512bh as_bh(__m512i v) { return (__m512bh)v; }

// Both bf16 of a pair as one 32-bit lane, broadcast to all 16 lanes.
__m512bh broadcast_pair(const bf16_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof v);
  return as_bh(_mm512_set1_epi32(v));
}

// store_c (gemm_bf16_kernels.h) on 16 columns of C, the first n of them.
void store_16(float* c, __m512 acc, int n, const Tile& t) {
  const __mmask16 m = first_lanes(n);
  const __m512 alpha = _mm512_set1_ps(t.alpha);
  __m512 v;
  if (!t.first) v = _mm512_fmadd_ps(alpha, acc, _mm512_maskz_loadu_ps(m, c));
  else if (t.beta == 0.0f) v = _mm512_mul_ps(alpha, acc);
  else
    v = _mm512_fmadd_ps(_mm512_set1_ps(t.beta), _mm512_maskz_loadu_ps(m, c),
                        _mm512_mul_ps(alpha, acc));
  _mm512_mask_storeu_ps(c, m, v);
}

// The tile's NV vectors of 16 columns per row; NV = 3 (48 columns) but in a narrow last panel.
template <int NV>
void micro_nv(const bf16_t* a, const bf16_t* b, int64_t kpairs, const Tile& t) {
  __m512 c[MR][NV];
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < NV; ++v) c[i][v] = _mm512_setzero_ps();
  for (int64_t kp = 0; kp < kpairs; ++kp, a += 2 * MR, b += 32 * NV) {
    __m512bh bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = as_bh(_mm512_loadu_si512(b + 32 * v));
    for (int i = 0; i < MR; ++i) {
      const __m512bh ai = broadcast_pair(a + 2 * i);
      for (int v = 0; v < NV; ++v) c[i][v] = _mm512_dpbf16_ps(c[i][v], ai, bv[v]);
    }
  }
  for (int i = 0; i < MR && i < t.rows; ++i)
    for (int v = 0; v < NV; ++v) store_16(t.c + i * t.ldc + 16 * v, c[i][v], t.cols - 16 * v, t);
}

void micro(const bf16_t* a, const bf16_t* b, int64_t kpairs, int nv, const Tile& t) {
  if (nv == 3) return micro_nv<3>(a, b, kpairs, t);
  if (nv == 2) return micro_nv<2>(a, b, kpairs, t);
  micro_nv<1>(a, b, kpairs, t);
}

// K contiguous in each lane (op(A) untransposed, op(B) transposed): 16 lanes by 16 pairs at a
// time, each lane's 32 values rounded as 16 pairs, then transposed to [pair][lane]. W = MR
// (A panels): the 16 lanes are two panels, the second (lanes past MR, if any) right after the
// first.
void pack_k_contiguous(bf16_t* dst, const float* src, int64_t ls, int lanes, int W, int kc) {
  const int kpairs = (kc + 1) / 2;
  const bool a_panels = W == MR;
  bf16_t* const second = dst + int64_t(MR) * 2 * kpairs;
  for (int l0 = 0; l0 < W; l0 += 16) {
    const __mmask16 store = first_lanes(W - l0);
    for (int kp0 = 0; kp0 < kpairs; kp0 += 16) {
      __m512i r[16];
      constexpr int kAhead = 128;  // floats prefetched ahead in each lane (see below)
      if (2 * kp0 + kAhead < kc)
        for (int l = 0; l < 16 && l0 + l < lanes; ++l) {
          __builtin_prefetch(src + (l0 + l) * ls + 2 * kp0 + kAhead);
          __builtin_prefetch(src + (l0 + l) * ls + 2 * kp0 + kAhead + 16);
        }
      for (int l = 0; l < 16; ++l)
        r[l] = l0 + l < lanes ? round_32(src + (l0 + l) * ls + 2 * kp0, kc - 2 * kp0)
                              : _mm512_setzero_si512();
      transpose16(r);
      for (int d = 0; d < 16 && kp0 + d < kpairs; ++d) {
        if (a_panels) {
          const int64_t at = int64_t(kp0 + d) * MR * 2;
          _mm256_storeu_si256((__m256i*)(dst + at), _mm512_castsi512_si256(r[d]));
          if (lanes > MR)
            _mm256_storeu_si256((__m256i*)(second + at), _mm512_extracti64x4_epi64(r[d], 1));
          continue;
        }
        _mm512_mask_storeu_epi32(dst + (int64_t(kp0 + d) * W + l0) * 2, store, r[d]);
      }
    }
  }
}

// Lanes contiguous (op(A) transposed, op(B) untransposed): per pair, 16 lanes of each of its
// two K rows rounded together and interleaved into 16 pairs.
// Both packers read many short runs far apart (a panel's 48 columns of 512 rows; 16 lanes
// of 32 values), which the hardware prefetcher does not follow: prefetched here, ResNet-50's
// 1x1 layers' forward and input-gradient GEMMs at batch 16 take 31 -> 26 ms (bench/RESULTS.md).
void pack_lanes_contiguous(bf16_t* dst, const float* src, int64_t ks, int lanes, int W,
                           int kc) {
  constexpr int kAhead = 8;  // rows prefetched ahead
  for (int kp = 0; kp < (kc + 1) / 2; ++kp) {
    const float* row0 = src + 2 * kp * ks;
    const bool has_row1 = 2 * kp + 1 < kc;
    for (int r = 0; r < 2; ++r)
      if (2 * kp + kAhead + r < kc)
        for (int l0 = 0; l0 < lanes; l0 += 16)
          __builtin_prefetch(row0 + (kAhead + r) * ks + l0);
    for (int l0 = 0; l0 < W; l0 += 16) {
      const __mmask16 load = first_lanes(lanes - l0);
      const __m512 lo = _mm512_maskz_loadu_ps(load, row0 + l0);
      const __m512 hi =
          has_row1 ? _mm512_maskz_loadu_ps(load, row0 + ks + l0) : _mm512_setzero_ps();
      const __m512i pairs = round_pairs(lo, hi);
      _mm512_mask_storeu_epi32(dst + (int64_t(kp) * W + l0) * 2, first_lanes(W - l0), pairs);
    }
  }
}

void pack_f32(bf16_t* dst, const float* src, int64_t ls, int64_t ks, int lanes, int W, int kc) {
  if (ks == 1) return pack_k_contiguous(dst, src, ls, lanes, W, kc);
  if (ls == 1) return pack_lanes_contiguous(dst, src, ks, lanes, W, kc);
  pack_scalar(dst, src, ls, ks, lanes, W, kc, 0, W, 0, (kc + 1) / 2);
}

void round(bf16_t* dst, const float* src, int64_t n) {
  for (int64_t i = 0; i < n; i += 32) {
    const int left = n - i < 32 ? int(n - i) : 32;
    const __m512i v = round_32(src + i, left);
    _mm512_mask_storeu_epi16(dst + i, left == 32 ? ~__mmask32(0) : (__mmask32(1) << left) - 1, v);
  }
}

constexpr Kernels kKernels{"native", micro, pack_f32, round};

}  // namespace

const Kernels* native_kernels() { return &kKernels; }

}  // namespace mpicnn::bf16k
