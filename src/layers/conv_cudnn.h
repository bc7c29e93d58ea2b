// The cuDNN convolution (conv_engine.h): CUDA tensors, NCHW float32 or the config's NHWC format
// (kernels/conv2d.cu), algorithms chosen once at plan.
#pragma once
#include <memory>
#include <string>

#include "core/gpu.h"
#include "layers/conv_engine.h"

namespace mpicnn {

class CudnnEngine final : public ConvEngine {
 public:
  CudnnEngine(const ConvSpec& s, const ExecConfig& cfg);
  void forward(Tensor& out, const Tensor& in, const Tensor& weight, const Tensor* bias) override;
  void backward(Tensor& din, Tensor* gw, Tensor* gb, const Tensor& dout, const Tensor& in,
                const Tensor& weight) override;
  std::string note() const override;
  const CudnnEngine* cudnn() const override { return this; }

  // The descriptors and algorithms: folded inference (layers/fold.h) runs its fused call on them.
  gpu::ConvPlan& plan() const { return *plan_; }
  // The activations' format the plan was made for (plain, or NHWC of a type).
  Format format() const { return format_; }

 private:
  ConvSpec s_;
  Precision precision_;
  Format format_;
  std::shared_ptr<gpu::ConvPlan> plan_;
  // The channels-last path (activations in format_, NHWC): cuDNN takes the filters in that type
  // as (OC, KH, KW, IC/groups), so forward converts the float weights into typed_weight_ each
  // call, and backward writes the weight gradient fresh into typed_grad_ and adds it, converted,
  // into the float slab. The bias stays float (our NHWC bias kernels).
  Tensor typed_weight_, typed_grad_;
};

}  // namespace mpicnn
