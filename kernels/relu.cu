// ReLU of the CUDA backend (src/layers/relu.cpp): forward and backward, either in place. Not
// cuDNN's activation: a plain grid-stride loop with the CPU's NaN rule.
#include "common.cuh"

namespace mpicnn::gpu {

namespace {

// As ReLU::forward: `x > 0 ? x : 0`, so NaN becomes 0 like on the CPU.
__global__ void relu_forward_kernel(float* y, const float* x, int64_t n) {
  for (int64_t i = global_index(); i < n; i += grid_stride()) {
    const float v = x[i];
    y[i] = v > 0.f ? v : 0.f;
  }
}

__global__ void relu_backward_kernel(float* dx, const float* dy, const float* y, int64_t n) {
  for (int64_t i = global_index(); i < n; i += grid_stride()) dx[i] = y[i] > 0.f ? dy[i] : 0.f;
}

}  // namespace

void CudaBackend::relu_forward(Elem t, void* y, const void* x, int64_t n) {
  if (t != Elem::F32) return relu_forward_typed(t, y, x, n);
  if (n <= 0) return;
  relu_forward_kernel<<<blocks_for(n), kThreads, 0, ctx().stream>>>(
      static_cast<float*>(y), static_cast<const float*>(x), n);
  KERNEL_CHECK();
}

void CudaBackend::relu_backward(Elem t, void* dx, const void* dy, const void* y, int64_t n) {
  if (t != Elem::F32) return relu_backward_typed(t, dx, dy, y, n);
  if (n <= 0) return;
  relu_backward_kernel<<<blocks_for(n), kThreads, 0, ctx().stream>>>(
      static_cast<float*>(dx), static_cast<const float*>(dy), static_cast<const float*>(y), n);
  KERNEL_CHECK();
}

}  // namespace mpicnn::gpu
