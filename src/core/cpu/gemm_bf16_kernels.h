// The kernels of core/gemm_bf16.h, one set per path (native AVX512-BF16; emulated in AVX-512F;
// the scalar reference), behind a struct of function pointers that core/gemm_bf16.cpp picks at
// run time; and the scalar math every path is defined by. Nothing here blocks, allocates or
// threads. The scalar functions are `static inline`: each kernel file, compiled with its own
// instruction-set flags, keeps its own copy, so the linker cannot hand the reference (which
// runs on any x86-64) a copy built with AVX-512 instructions.
#pragma once
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>

#include "core/gemm_bf16.h"

namespace mpicnn::bf16k {

constexpr int MR = kBf16MR, NR = kBf16NR;

// Packed panels: a panel is W lanes (rows of op(A): W = MR; columns of op(B): W = NR) by kc
// values of K (kc rounded up to even), stored [kc / 2][W][2]: the two values of a K pair of a
// lane side by side, as vdpbf16ps reads them. Lanes past the matrix and the value after an
// odd K are zero.
//
// Packs `lanes` (<= W) lanes by kc values of K (the last pair padded with a zero when kc is
// odd) from src, whose element (lane l, k) is src[l * ls + k * ks], into dst. A panels (W = MR)
// with K contiguous (ks == 1) may be packed two at a time: lanes past MR (up to 2 * MR) fill a
// second panel, the next one in memory (dst + MR * kc rounded up to even); the native path then
// runs one 16-lane transpose where a lone A panel wastes half of one.
using PackF32 = void (*)(bf16_t* dst, const float* src, int64_t ls, int64_t ks, int lanes,
                         int W, int kc);
// Where a micro-kernel's tile goes: rows x cols of C (row stride ldc), updated as
// core/gemm_bf16.h states (store_c); `first`: K block 0.
struct Tile {
  float* c;
  int64_t ldc;
  int rows, cols;
  float alpha, beta;
  bool first;
};
// The tile of one A panel (MR lanes) times one B panel of 16 * nv lanes (nv = 1, 2 or 3: a
// narrow last panel costs what its columns need) over kpairs pairs of K, summed in the order
// core/gemm_bf16.h states and stored into t.
using Micro = void (*)(const bf16_t* a, const bf16_t* b, int64_t kpairs, int nv, const Tile& t);
// dst[i] = round_bf16(src[i]) for i < n.
using Round = void (*)(bf16_t* dst, const float* src, int64_t n);

struct Kernels {
  const char* name;  // as bf16_kernels_name() (core/gemm_bf16.h) gives it
  Micro micro;
  PackF32 pack_f32;
  Round round;
};
const Kernels* native_kernels();    // gemm_bf16_avx512.cpp: call only on an AVX512-BF16 CPU
// gemm_bf16_avx512f.cpp: call only on a CPU with AVX-512F, BW and VL
const Kernels* emulated_avx512_kernels();
const Kernels* emulated_kernels();  // gemm_bf16_emulated.cpp: scalar, any CPU (the reference)

// Round to nearest even, as vcvtneps2bf16: fp32 subnormals are read as zero (a zero of their
// sign), NaN stays a quiet NaN with its sign and top payload.
static inline bf16_t round_bf16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7F800000u) == 0) return bf16_t((x >> 16) & 0x8000u);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return bf16_t((x >> 16) | 0x0040u);
  return bf16_t((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

// A bf16 as vdpbf16ps reads it: subnormals as zero.
static inline float bf16_value(bf16_t b) {
  if ((b & 0x7F80u) == 0) b &= 0x8000u;
  return std::bit_cast<float>(uint32_t(b) << 16);
}

// vdpbf16ps flushes results below FLT_MIN to a zero of their sign.
static inline float flush_subnormal(float x) {
  return std::fabs(x) < FLT_MIN ? std::copysign(0.0f, x) : x;
}

// C's element from the K block's sum: the rule both kernels write with (the native one in
// vector form, with the same single roundings).
static inline float store_c(float c, float acc, const Tile& t) {
  if (!t.first) return std::fma(t.alpha, acc, c);
  if (t.beta == 0.0f) return t.alpha * acc;
  return std::fma(t.beta, c, t.alpha * acc);
}

// One lane of vdpbf16ps: the odd element's product first, each added with one rounding.
static inline float dot_pair(float acc, float a0, float a1, float b0, float b1) {
  acc = flush_subnormal(std::fma(a1, b1, acc));
  return flush_subnormal(std::fma(a0, b0, acc));
}

// The scalar packing both paths share (the native path's vector code leaves it the edges):
// rows [kp0, kp1) of pairs and lanes [l0, l1) of a panel packed as PackF32 says. Src is float
// (rounded here) or bf16_t (copied: the kernels read its subnormals as zero).
template <typename Src>
static inline void pack_scalar(bf16_t* dst, const Src* src, int64_t ls, int64_t ks, int lanes,
                               int W, int kc, int l0, int l1, int kp0, int kp1) {
  for (int kp = kp0; kp < kp1; ++kp)
    for (int l = l0; l < l1; ++l)
      for (int e = 0; e < 2; ++e) {
        const int k = 2 * kp + e;
        bf16_t v = 0;
        if (k < kc && l < lanes) {
          if constexpr (sizeof(Src) == 2) v = src[l * ls + k * ks];
          else v = round_bf16(src[l * ls + k * ks]);
        }
        dst[(int64_t(kp) * W + l) * 2 + e] = v;
      }
}

}  // namespace mpicnn::bf16k
