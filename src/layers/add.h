// Residual Add: out = a + b (same shapes), and `accumulate` (dst += src) for summing gradients
// where a tensor feeds two consumers. Not a broadcasting add.
#pragma once
#include "layers/layer.h"

namespace mpicnn {

class Add : public Layer {
 public:
  const char* kind() const override { return "Add"; }
  void forward(Tensor& out, const Tensor& a, const Tensor& b);  // any shape; out may alias a or b
  // da = dout and db = dout ('='; each skipped when undefined or when it is dout itself).
  void backward(Tensor& da, Tensor& db, const Tensor& dout);
};

// dst += src, same shape.
void accumulate(Tensor& dst, const Tensor& src);

}  // namespace mpicnn
