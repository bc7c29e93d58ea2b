// BatchNorm2d's per-element math as the CUDA kernels compute it (kernels/batchnorm.cu calls
// these), written once for the host and the device so that a CPU test can check it bit for bit
// against src/layers/batchnorm.cpp without a GPU (tests/test_batchnorm_math.cpp). The CPU layer
// keeps its own loops (GCC vectorises and contracts them); these functions spell out the
// roundings GCC gives it: an FMA where it contracts a*b + c, a product rounded alone elsewhere.
// Host callers must not let the compiler contract across them (-ffp-contract=off, as the test).
#pragma once
#include <cmath>

#if defined(__CUDACC__)
#define MPICNN_HD __host__ __device__
#else
#define MPICNN_HD
#endif

namespace mpicnn::bn_math {

// a * b rounded on its own (nvcc would otherwise fuse it into a following add).
MPICNN_HD inline float mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

// The affine map of channel c: y = x * scale + shift.
MPICNN_HD inline float scale(float weight, float invstd) { return mul(weight, invstd); }
MPICNN_HD inline float shift(float bias, float mean, float scale) {
  return fmaf(-mean, scale, bias);
}

// Forward, one element: x * scale + shift, plus the residual r (a residual block's last
// BatchNorm), then the ReLU, in the order of the separate layers (BatchNorm, add, ReLU).
template <bool kResidual, bool kRelu>
MPICNN_HD inline float apply(float x, float scale, float shift, float r) {
  float v = fmaf(x, scale, shift);
  if constexpr (kResidual) v = v + r;
  if constexpr (kRelu) v = v > 0.f ? v : 0.f;
  return v;
}

// Backward, the gradient that reaches the BatchNorm: with a fused ReLU, dy of the ReLU's output
// y masked by y > 0 (ReLU::backward's values: dy or +0).
template <bool kRelu>
MPICNN_HD inline float grad(float dy, float y) {
  if constexpr (kRelu) return y > 0.f ? dy : 0.f;
  return dy;
}

// Statistics of one channel from its sums over M values (double): save_mean and save_invstd
// (the batch's mean and 1/sqrt(biased variance + eps)), and the running statistics moved
// towards the mean and the unbiased variance by momentum (a*b + c*d as GCC contracts it on the
// CPU: fma(a, b, c*d)). Eval: the running statistics' invstd.
MPICNN_HD inline void finish_stats(float& save_mean, float& save_invstd, float& running_mean,
                                   float& running_var, double sum, double sum_sq_dev, double M,
                                   float eps, float momentum) {
  const double mu = sum / M, var = sum_sq_dev / M;
  save_mean = float(mu);
  save_invstd = float(1.0 / sqrt(var + double(eps)));
  const double m = double(momentum), keep = 1.0 - m;
  running_mean = float(fma(keep, double(running_mean), m * mu));
  running_var = float(fma(keep, double(running_var), m * var * M / (M - 1)));
}
MPICNN_HD inline float eval_invstd(float running_var, float eps) {
  return float(1.0 / sqrt(double(running_var) + double(eps)));
}

// The normalised input (x - mean) * invstd.
MPICNN_HD inline float xhat(float x, float mean, float invstd) { return mul(x - mean, invstd); }

// dx = k * (g - mdy - xhat * mdyx) with k = weight * invstd, mdy = mean(g), mdyx = mean(g * xhat)
// over the channel (0 and 0 with the running statistics).
MPICNN_HD inline float dx(float g, float xhat, float k, float mdy, float mdyx) {
  return mul(k, fmaf(-xhat, mdyx, g - mdy));
}

}  // namespace mpicnn::bn_math
