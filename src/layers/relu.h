// ReLU: out = max(in, 0). In place is allowed (out and in the same tensor); backward then
// uses the output's sign, which equals the input's for ReLU. Not a leaky/parametric ReLU.
#pragma once
#include "layers/layer.h"

namespace mpicnn {

class ReLU : public UnaryLayer {
 public:
  const char* kind() const override { return "ReLU"; }
  Shape output_shape(const Shape& in) const override { return in; }
  void forward(Tensor& out, const Tensor& in) override;                  // (any shape)
  // din = dout * (out > 0); din may alias dout.
  void backward(Tensor& din, const Tensor& dout, const Tensor& in, const Tensor& out) override;
};

}  // namespace mpicnn
