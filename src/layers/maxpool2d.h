// MaxPool2d on CPU with PyTorch's semantics (padding is -inf, floor/ceil output sizes, first
// maximum wins ties, NaN propagates).
// Not a max-unpool and not adaptive max pooling; no parameters, one int32 argmax workspace.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "core/gpu.h"
#include "layers/layer.h"
#include "layers/pool_common.h"

namespace mpicnn {

// {h, w} pairs. stride {0, 0} means "same as kernel" (PyTorch's stride=None).
struct MaxPool2dOptions {
  std::array<int, 2> kernel = {1, 1};
  std::array<int, 2> stride = {0, 0};
  std::array<int, 2> padding = {0, 0};
  std::array<int, 2> dilation = {1, 1};
  bool ceil_mode = false;
};

class MaxPool2d : public UnaryLayer {
 public:
  // Throws mpicnn::Error on a bad configuration (non-positive sizes, padding > kernel/2).
  explicit MaxPool2d(const MaxPool2dOptions& opt);
  // Square form, as torchvision writes it: MaxPool2d(3, 2, 1).
  explicit MaxPool2d(int kernel, int stride = 0, int padding = 0, int dilation = 1,
                     bool ceil_mode = false);

  const char* kind() const override { return "MaxPool2d"; }
  const MaxPool2dOptions& options() const { return opt_; }
  Shape output_shape(const Shape& in) const override;  // (N, C, H, W) -> (N, C, OH, OW)
  // Sizes the argmax workspace for inputs up to in[0] images of this (C, H, W). Required
  // before forward.
  void plan(const Shape& in, const ExecConfig& cfg) override;
  // out (N, C, OH, OW) = window max of in (N, C, H, W); records each output's argmax.
  // out must not alias in.
  void forward(Tensor& out, const Tensor& in) override;
  // din (N, C, H, W) '=': zero, then dout (N, C, OH, OW) added at the argmax of the last
  // forward (overlapping windows add up). A window holding no input cell (possible only with
  // dilation) has output -inf and passes no gradient.
  void backward(Tensor& din, const Tensor& dout, const Tensor& in, const Tensor& out) override;

 private:
  MaxPool2dOptions opt_;
  Shape planned_;                // (N, C, H, W) given to plan()
  int64_t forward_batch_ = -1;   // batch of the last forward, whose argmax backward uses
  std::vector<int32_t> argmax_;  // (N, C, OH, OW): index h*W + w into the input plane, or -1
  std::shared_ptr<void> argmax_dev_;  // the same on the GPU, when planned there (int32)
  gpu::PoolDesc desc(const Shape& in) const;
};

}  // namespace mpicnn
