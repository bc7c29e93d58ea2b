// A BatchNorm2d folded into the Conv2d before it, on the GPU (src/layers/fold.cpp): the folded
// weights and bias, one thread per weight, with the per-element math of layers/fold_math.h (which
// a CPU test checks). Not the convolution that uses them: conv_bias_act_forward, kernels/conv2d.cu.
#include "common.cuh"
#include "layers/fold_math.h"

namespace mpicnn::gpu {

namespace {

__global__ void fold_conv_bn_kernel(float* w_out, float* b_out, const float* w, const float* b,
                                    const float* gamma, const float* beta, const float* mean,
                                    const float* var, float eps, int64_t per_oc, int64_t n) {
  for (int64_t i = global_index(); i < n; i += grid_stride())
    fold_math::fold_element(w_out, b_out, w, b, gamma, beta, mean, var, eps, per_oc, i);
}

}  // namespace

void CudaBackend::fold_conv_bn(float* w_out, float* b_out, const float* w, const float* b,
                               const float* gamma, const float* beta, const float* mean,
                               const float* var, float eps, int64_t oc, int64_t per_oc) {
  CHECK(oc > 0 && per_oc > 0, "fold_conv_bn: empty weights (", oc, " x ", per_oc, ")");
  const int64_t n = oc * per_oc;
  fold_conv_bn_kernel<<<blocks_for(n), kThreads, 0, ctx().stream>>>(
      w_out, b_out, w, b, gamma, beta, mean, var, eps, per_oc, n);
  KERNEL_CHECK();
}

}  // namespace mpicnn::gpu
