// AdaptiveAvgPool2d on CPU with PyTorch's bins: output cell i averages input rows
// [floor(i*H/OH), ceil((i+1)*H/OH)), so bins may overlap and the output may exceed the input.
// Not adaptive max pooling; no parameters.
#pragma once
#include "core/gpu.h"
#include "layers/layer.h"

namespace mpicnn {

class AdaptiveAvgPool2d : public UnaryLayer {
 public:
  // Throws mpicnn::Error unless out_h, out_w >= 1.
  AdaptiveAvgPool2d(int out_h, int out_w);
  explicit AdaptiveAvgPool2d(int out) : AdaptiveAvgPool2d(out, out) {}

  const char* kind() const override { return "AdaptiveAvgPool2d"; }
  int out_h() const { return out_h_; }
  int out_w() const { return out_w_; }
  Shape output_shape(const Shape& in) const override;  // (N, C, H, W) -> (N, C, out_h, out_w)
  // out (N, C, out_h, out_w) = bin means of in (N, C, H, W). out must not alias in.
  void forward(Tensor& out, const Tensor& in) override;
  // din (N, C, H, W) '=': zero, then each dout / bin size spread over its bin.
  void backward(Tensor& din, const Tensor& dout, const Tensor& in, const Tensor& out) override;

 private:
  gpu::PoolDesc desc(const Shape& in) const;
  int out_h_, out_w_;
};

}  // namespace mpicnn
