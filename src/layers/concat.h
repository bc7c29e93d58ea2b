// Channel concatenation as torch.cat(dim=1) on (N, C_i, H, W) inputs (DenseNet, SqueezeNet).
// Not a general any-axis concat.
#pragma once
#include <initializer_list>
#include <span>
#include <vector>

#include "layers/layer.h"

namespace mpicnn {

class Concat : public Layer {
 public:
  const char* kind() const override { return "Concat"; }
  static Shape output_shape(const std::vector<Shape>& ins);
  // out (N, sum C_i, H, W) from ins (N, C_i, H, W). Spans and braced lists, not vectors, so
  // a call inside the training step allocates nothing.
  void forward(Tensor& out, std::span<const Tensor* const> ins);
  void forward(Tensor& out, std::initializer_list<const Tensor*> ins) {
    forward(out, std::span<const Tensor* const>(ins.begin(), ins.size()));
  }
  // dins[i] = channel slice i of dout ('='); every entry is required.
  void backward(std::span<Tensor* const> dins, const Tensor& dout);
  void backward(std::initializer_list<Tensor*> dins, const Tensor& dout) {
    backward(std::span<Tensor* const>(dins.begin(), dins.size()), dout);
  }
};

}  // namespace mpicnn
