// The math of folding an eval-mode BatchNorm2d into the Conv2d before it, per element, written
// once for the host and the device: kernels/fold.cu runs it on the GPU (layers/fold.h), the CPU
// test tests/test_fold.cpp checks it against conv-then-BatchNorm in double without a GPU.
// With s = gamma / sqrt(var + eps) per output channel:
//   w' = w * s,   b' = (b - mean) * s + beta   (b = 0 for a convolution without bias)
// so that conv(x, w') + b' = (conv(x, w) + b - mean) * s + beta, BatchNorm2d's eval output. Not a
// layer, and not the BatchNorm's own kernels (layers/batchnorm_math.h, whose scale it shares).
#pragma once
#include <cmath>
#include <cstdint>

#include "layers/batchnorm_math.h"

namespace mpicnn::fold_math {

// 1 / sqrt(var + eps) as BatchNorm2d's eval mode computes it (in double, rounded once to float),
// so that the folded scale is the BatchNorm's own: a zero variance gives 1 / sqrt(eps).
MPICNN_HD inline float invstd(float var, float eps) {
  return float(1.0 / sqrt(double(var) + double(eps)));
}

// s = gamma * invstd (bn_math::scale, the factor the BatchNorm's apply pass uses).
MPICNN_HD inline float scale(float gamma, float var, float eps) {
  return bn_math::scale(gamma, invstd(var, eps));
}

// w' = w * s.
MPICNN_HD inline float weight(float w, float s) { return bn_math::mul(w, s); }

// b' = (b - mean) * s + beta; with b = 0 the BatchNorm's own shift (bn_math::shift).
MPICNN_HD inline float bias(float b, float mean, float s, float beta) {
  return fmaf(b - mean, s, beta);
}

// Element i of the folded weights w_out (OC, per_oc) from w (OC, per_oc), and, for the first
// element of each output channel, that channel's folded bias b_out (OC); b (OC) may be null
// (a convolution without bias). gamma, beta, mean, var (OC) are the BatchNorm's weight, bias
// and running statistics. One call per element: the GPU's threads and the CPU test's loop.
MPICNN_HD inline void fold_element(float* w_out, float* b_out, const float* w, const float* b,
                                   const float* gamma, const float* beta, const float* mean,
                                   const float* var, float eps, int64_t per_oc, int64_t i) {
  const int64_t c = i / per_oc;
  const float s = scale(gamma[c], var[c], eps);
  w_out[i] = weight(w[i], s);
  if (i % per_oc == 0) b_out[c] = bias(b ? b[c] : 0.f, mean[c], s, beta[c]);
}

}  // namespace mpicnn::fold_math
