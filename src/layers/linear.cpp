// Linear: three GEMM calls (forward, backward data, backward weight; core/blas.h's gemm_in, on
// the CPU or the GPU, in the precision plan() took) and the bias, a loop on the CPU and
// kernels/linear.cu on CUDA tensors.
#include "layers/linear.h"

#include <cmath>

#include "core/blas.h"
#include "core/rng.h"
#include "core/gpu.h"

namespace mpicnn {

Linear::Linear(int in_features, int out_features, bool bias)
    : in_(in_features), out_(out_features), has_bias_(bias) {
  CHECK(in_features >= 1 && out_features >= 1, "Linear: features must be >= 1, got ",
        in_features, " -> ", out_features);
}

void Linear::register_state(ParamStore& store, const std::string& prefix) {
  weight_name_ = prefix + "weight";
  store.param(weight_name_, {out_, in_}, &weight, &grad_weight);
  if (has_bias_) {
    bias_name_ = prefix + "bias";
    store.param(bias_name_, {out_}, &bias, &grad_bias, /*decay=*/false);
  }
}

void Linear::reset_parameters(uint64_t seed) {
  const real bound = 1.0f / std::sqrt(real(in_));
  fill_uniform(Rng(seed, weight_name_), weight.data(), weight.numel(), -bound, bound);
  if (has_bias_) fill_uniform(Rng(seed, bias_name_), bias.data(), bias.numel(), -bound, bound);
}

Shape Linear::output_shape(const Shape& in) const {
  CHECK(in.ndim == 2 && in[1] == in_, "Linear(", in_, " -> ", out_, "): input must be (N, ", in_,
        "), got ", in.str());
  return {in[0], out_};
}

void Linear::plan(const Shape& /*in*/, const ExecConfig& cfg) {
  precision_ = cfg.precision;
  device_ = cfg.device;
}

std::string Linear::plan_note() const {
  return std::string(device_ == Device::CUDA ? "cuBLAS " : "") + precision_name(precision_) +
         " GEMM";
}

void Linear::forward(Tensor& out, const Tensor& in) {
  CHECK(out.shape() == output_shape(in.shape()), "Linear: out ", out.shape().str(),
        ", expected ", output_shape(in.shape()).str());
  CHECK(weight.defined(), "Linear: parameters not allocated (ParamStore::allocate)");
  const int N = int(in.size(0));
  real* y = out.data();
  if (on_gpu("Linear", {&out, &in, &weight})) {
    gemm_in(Device::CUDA, precision_, false, true, N, out_, in_, 1.f, in.data(), in_, weight.data(),
            in_, 0.f, y, out_);
    if (has_bias_) gpu::backend().add_bias_rows(Elem::F32, y, bias.data(), N, out_);
    return;
  }
  if (has_bias_) {
    const real* b = bias.data();
#pragma omp parallel for schedule(static) if (int64_t(N) * out_ > 65536)
    for (int n = 0; n < N; ++n)
      for (int j = 0; j < out_; ++j) y[int64_t(n) * out_ + j] = b[j];
  }
  // y (N, out) = x (N, in) * W^T (in, out) [+ y]
  gemm_in(Device::CPU, precision_, false, true, N, out_, in_, 1.f, in.data(), in_, weight.data(),
          in_, has_bias_ ? 1.f : 0.f, y, out_);
}

void Linear::add_param_grads(Device dev, const Tensor& dout, const Tensor& in) {
  const int N = int(in.size(0));
  // grad_weight (out, in) += dy^T (out, N) * x (N, in)
  gemm_in(dev, precision_, true, false, out_, in_, N, 1.f, dout.data(), out_, in.data(), in_, 1.f,
          grad_weight.data(), in_);
  if (has_bias_ && dev == Device::CUDA) {
    gpu::backend().sum_rows(grad_bias.data(), dout.data(), N, out_);
  } else if (has_bias_) {
    const real* dy = dout.data();
    real* gb = grad_bias.data();
    for (int n = 0; n < N; ++n)
#pragma omp simd
      for (int j = 0; j < out_; ++j) gb[j] += dy[int64_t(n) * out_ + j];
  }
}

void Linear::backward(Tensor& din, const Tensor& dout, const Tensor& in, const Tensor& /*out*/) {
  const int N = int(in.size(0));
  CHECK_SHAPE(dout, {N, out_});
  if (din.defined()) CHECK_SHAPE(din, {N, in_});
  if (frozen_ && !din.defined()) return;
  const Device dev =
      on_gpu("Linear backward", {&din, &dout, &in, &weight}) ? Device::CUDA : Device::CPU;
  if (!frozen_) add_param_grads(dev, dout, in);
  if (din.defined()) {
    // dx (N, in) = dy (N, out) * W (out, in)
    gemm_in(dev, precision_, false, false, N, in_, out_, 1.f, dout.data(), out_, weight.data(),
            in_, 0.f, din.data(), in_);
  }
}

}  // namespace mpicnn
