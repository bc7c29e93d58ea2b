// Linear (fully connected) as torch.nn.Linear: out = in * weight^T + bias, on (N, in_features)
// inputs; flatten 4-D activations first (Flatten or Tensor::reshape). GEMMs through OpenBLAS,
// or in bf16 on the CPU when planned so (core/precision.h).
#pragma once
#include <string>

#include "layers/layer.h"

namespace mpicnn {

class Linear : public UnaryLayer {
 public:
  Linear(int in_features, int out_features, bool bias = true);
  const char* kind() const override { return "Linear"; }
  void register_state(ParamStore& store, const std::string& prefix) override;
  // PyTorch's default: weight and bias ~ U(-1/sqrt(in), 1/sqrt(in)).
  void reset_parameters(uint64_t seed) override;
  Shape output_shape(const Shape& in) const override;
  // Takes the GEMMs' precision from cfg (core/precision.h: fp32 or bf16 on the CPU, the GPU's
  // math on CUDA); unplanned, a Linear runs fp32.
  void plan(const Shape& in, const ExecConfig& cfg) override;
  void forward(Tensor& out, const Tensor& in) override;  // (N, in) -> (N, out)
  // din '=', grad_weight and grad_bias '+='.
  void backward(Tensor& din, const Tensor& dout, const Tensor& in, const Tensor& out) override;

  int in_features() const { return in_; }
  int out_features() const { return out_; }
  bool has_bias() const { return has_bias_; }
  Precision precision() const { return precision_; }
  std::string plan_note() const override;  // its GEMMs: precision, and cuBLAS on the GPU

  Tensor weight, grad_weight;  // (out, in)
  Tensor bias, grad_bias;      // (out), undefined without bias

 private:
  // grad_weight and grad_bias += from dout (N, out) and in (N, in), on `dev`.
  void add_param_grads(Device dev, const Tensor& dout, const Tensor& in);
  int in_, out_;
  bool has_bias_;
  Precision precision_ = Precision::kFp32;
  Device device_ = Device::CPU;
  std::string weight_name_, bias_name_;
};

}  // namespace mpicnn
