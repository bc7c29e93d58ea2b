// ReLU forward/backward on CPU (OpenMP, vectorisable loops); CUDA tensors go to kernels/relu.cu.
#include "layers/relu.h"

#include "core/gpu.h"

namespace mpicnn {

void ReLU::forward(Tensor& out, const Tensor& in) {
  CHECK(out.shape() == in.shape(), "ReLU: out ", out.shape().str(), " vs in ", in.shape().str());
  if (on_gpu_as("ReLU", in.format(), {&out, &in}))
    return gpu::backend().relu_forward(in.format().elem, out.raw(), in.raw(), in.numel());
  const real* x = in.data();
  real* y = out.data();
  const int64_t n = in.numel();
#pragma omp parallel for simd schedule(static) if (n > 32768)
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0.f ? x[i] : 0.f;
}

void ReLU::backward(Tensor& din, const Tensor& dout, const Tensor& /*in*/, const Tensor& out) {
  if (!din.defined()) return;
  CHECK(din.shape() == out.shape() && dout.shape() == out.shape(), "ReLU backward: din ",
        din.shape().str(), ", dout ", dout.shape().str(), ", out ", out.shape().str());
  if (on_gpu_as("ReLU backward", out.format(), {&din, &dout, &out}))
    return gpu::backend().relu_backward(out.format().elem, din.raw(), dout.raw(), out.raw(),
                                        out.numel());
  const real* y = out.data();
  const real* dy = dout.data();
  real* dx = din.data();
  const int64_t n = out.numel();
#pragma omp parallel for simd schedule(static) if (n > 32768)
  for (int64_t i = 0; i < n; ++i) dx[i] = y[i] > 0.f ? dy[i] : 0.f;
}

}  // namespace mpicnn
