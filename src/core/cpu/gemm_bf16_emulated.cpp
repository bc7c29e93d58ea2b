// The bf16 GEMM's reference kernels in plain scalar float32 arithmetic: the same packing and the
// same sums, step for step, as vdpbf16ps (gemm_bf16_kernels.h's dot_pair), the bits every other
// path must give (MPICNN_BF16=reference; the emulated path on CPUs without AVX-512). Correct
// rather than fast: several times slower than the fp32 GEMM.
#include "core/cpu/gemm_bf16_kernels.h"

namespace mpicnn::bf16k {

namespace {

void micro(const bf16_t* a, const bf16_t* b, int64_t kpairs, int nv, const Tile& t) {
  const int W = 16 * nv;
  float c[MR][NR] = {};
  for (int64_t kp = 0; kp < kpairs; ++kp, a += 2 * MR, b += 2 * W) {
    float b0[NR], b1[NR];
    for (int j = 0; j < W; ++j) {
      b0[j] = bf16_value(b[2 * j]);
      b1[j] = bf16_value(b[2 * j + 1]);
    }
    for (int i = 0; i < MR; ++i) {
      const float a0 = bf16_value(a[2 * i]), a1 = bf16_value(a[2 * i + 1]);
      for (int j = 0; j < W; ++j) c[i][j] = dot_pair(c[i][j], a0, a1, b0[j], b1[j]);
    }
  }
  for (int i = 0; i < t.rows; ++i)
    for (int j = 0; j < t.cols; ++j) t.c[i * t.ldc + j] = store_c(t.c[i * t.ldc + j], c[i][j], t);
}

void pack_f32(bf16_t* dst, const float* src, int64_t ls, int64_t ks, int lanes, int W, int kc) {
  if (lanes > W) {  // two A panels (gemm_bf16_kernels.h)
    pack_f32(dst, src, ls, ks, W, W, kc);
    return pack_f32(dst + int64_t(W) * ((kc + 1) / 2 * 2), src + W * ls, ls, ks, lanes - W, W, kc);
  }
  pack_scalar(dst, src, ls, ks, lanes, W, kc, 0, W, 0, (kc + 1) / 2);
}

void round(bf16_t* dst, const float* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = round_bf16(src[i]);
}

constexpr Kernels kKernels{"emulated in scalar float32, several times slower than fp32", micro,
                           pack_f32, round};

}  // namespace

const Kernels* emulated_kernels() { return &kKernels; }

}  // namespace mpicnn::bf16k
