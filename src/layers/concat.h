// Channel concatenation as torch.cat(dim=1) on (N, C_i, H, W) inputs (DenseNet, SqueezeNet).
// Not a general any-axis concat.
#pragma once
#include <vector>

#include "layers/layer.h"

namespace mpicnn {

class Concat : public Layer {
 public:
  const char* kind() const override { return "Concat"; }
  static Shape output_shape(const std::vector<Shape>& ins);
  // out (N, sum C_i, H, W) from ins (N, C_i, H, W).
  void forward(Tensor& out, const std::vector<const Tensor*>& ins);
  // dins[i] = channel slice i of dout ('='); every entry is required.
  void backward(const std::vector<Tensor*>& dins, const Tensor& dout);
};

}  // namespace mpicnn
