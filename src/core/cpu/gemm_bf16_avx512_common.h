// The bf16 GEMM's AVX-512 code that the native kernels (core/cpu/gemm_bf16_avx512.cpp) and the
// emulated ones (core/cpu/gemm_bf16_avx512f.cpp) share: the micro-kernel over a step S, storing
// a tile's vector into C, and packing and rounding, written once over a rounding R
// (R::round_32 and R::round_pairs, as core/cpu/bf16_avx512.h states them: the instruction's, or
// the same bits in integer arithmetic). Edges are masked loads and stores; an operand with no
// unit stride falls back to the shared scalar packing (gemm_bf16_kernels.h), whose rounding is
// the instruction's, bit for bit. Include only from files compiled with AVX-512 flags (Makefile); internal linkage, so that
// no other file's copy can be mixed up with them at link time.
#pragma once
#include "core/cpu/avx512_lanes.h"
#include "core/cpu/gemm_bf16_kernels.h"

namespace mpicnn::bf16k {
namespace {

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

template <class R>
struct Avx512Packing {
  // K contiguous in each lane (op(A) untransposed, op(B) transposed): 16 lanes by 16 pairs at a
  // time, each lane's 32 values rounded as 16 pairs, then transposed to [pair][lane]. W = MR
  // (A panels): the 16 lanes are two panels, the second (lanes past MR, if any) right after the
  // first.
  static void pack_k_contiguous(bf16_t* dst, const float* src, int64_t ls, int lanes, int W,
                                int kc) {
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
          r[l] = l0 + l < lanes ? R::round_32(src + (l0 + l) * ls + 2 * kp0, kc - 2 * kp0)
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
  static void pack_lanes_contiguous(bf16_t* dst, const float* src, int64_t ks, int lanes, int W,
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
        const __m512i pairs = R::round_pairs(lo, hi);
        _mm512_mask_storeu_epi32(dst + (int64_t(kp) * W + l0) * 2, first_lanes(W - l0), pairs);
      }
    }
  }

  static void pack_f32(bf16_t* dst, const float* src, int64_t ls, int64_t ks, int lanes, int W,
                       int kc) {
    if (ks == 1) return pack_k_contiguous(dst, src, ls, lanes, W, kc);
    if (ls == 1) return pack_lanes_contiguous(dst, src, ks, lanes, W, kc);
    pack_scalar(dst, src, ls, ks, lanes, W, kc, 0, W, 0, (kc + 1) / 2);
  }

  static void round(bf16_t* dst, const float* src, int64_t n) {
    for (int64_t i = 0; i < n; i += 32) {
      const int left = n - i < 32 ? int(n - i) : 32;
      const __m512i v = R::round_32(src + i, left);
      _mm512_mask_storeu_epi16(dst + i, left == 32 ? ~__mmask32(0) : (__mmask32(1) << left) - 1, v);
    }
  }
};

// The micro-kernel (gemm_bf16_kernels.h's Kernels::micro): the MR x 16 NV tile over kpairs
// packed pairs, written once over a step S: S::dot(a, b, acc) is one vdpbf16ps on a broadcast
// pair of op(A) and NV = 1..3 vectors of op(B)'s pairs (the instruction, or its emulation), and
// S::begin_sums(c) / S::end_sums(c, state) go around the K loop (nothing natively; DAZ and the
// flush emulated: core/cpu/bf16_avx512f.h).
template <class S>
struct Avx512Micro {
  static_assert(NR == 48 && MR == 8, "the micro-kernel is written for an 8 x 48 tile");

  template <int NV>
  static void tile(const bf16_t* a, const bf16_t* b, int64_t kpairs, const Tile& t) {
    __m512 c[MR][NV];
    for (int i = 0; i < MR; ++i)
      for (int v = 0; v < NV; ++v) c[i][v] = _mm512_setzero_ps();
    const unsigned state = S::begin_sums(c);
    for (int64_t kp = 0; kp < kpairs; ++kp, a += 2 * MR, b += 32 * NV) {
      __m512i bv[NV];
      for (int v = 0; v < NV; ++v) bv[v] = _mm512_loadu_si512(b + 32 * v);
      for (int i = 0; i < MR; ++i) {
        int32_t pair;  // both bf16 of a pair as one 32-bit lane, broadcast to all 16 lanes
        __builtin_memcpy(&pair, a + 2 * i, sizeof pair);
        const __m512i ai = _mm512_set1_epi32(pair);
        for (int v = 0; v < NV; ++v) c[i][v] = S::dot(ai, bv[v], c[i][v]);
      }
    }
    S::end_sums(c, state);
    for (int i = 0; i < MR && i < t.rows; ++i)
      for (int v = 0; v < NV; ++v)
        store_16(t.c + i * t.ldc + 16 * v, c[i][v], t.cols - 16 * v, t);
  }

  // NV = 3 (48 columns) but in a narrow last panel.
  static void micro(const bf16_t* a, const bf16_t* b, int64_t kpairs, int nv, const Tile& t) {
    if (nv == 3) return tile<3>(a, b, kpairs, t);
    if (nv == 2) return tile<2>(a, b, kpairs, t);
    tile<1>(a, b, kpairs, t);
  }
};

}  // namespace
}  // namespace mpicnn::bf16k
