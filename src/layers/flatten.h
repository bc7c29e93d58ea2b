// Flatten as torch.nn.Flatten(): (N, C, H, W) -> (N, C*H*W). NCHW is contiguous, so when out
// and in share memory (out = in.reshape(...)) nothing moves; otherwise it copies.
#pragma once
#include "layers/layer.h"

namespace mpicnn {

class Flatten : public UnaryLayer {
 public:
  const char* kind() const override { return "Flatten"; }
  Shape output_shape(const Shape& in) const override;
  void forward(Tensor& out, const Tensor& in) override;  // (N, ...) -> (N, prod(...))
  // din '=' (a copy unless it shares memory with dout).
  void backward(Tensor& din, const Tensor& dout, const Tensor& in, const Tensor& out) override;
};

}  // namespace mpicnn
