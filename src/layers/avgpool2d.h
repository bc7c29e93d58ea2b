// AvgPool2d on CPU with PyTorch's semantics: floor/ceil output sizes, count_include_pad and
// divisor_override deciding each window's divisor. Not adaptive pooling (see
// adaptive_avgpool2d.h); no dilation (PyTorch has none for average pooling); no parameters.
#pragma once
#include <array>
#include <optional>

#include "core/gpu.h"
#include "layers/layer.h"

namespace mpicnn {

// {h, w} pairs. stride {0, 0} means "same as kernel" (PyTorch's stride=None).
struct AvgPool2dOptions {
  std::array<int, 2> kernel = {1, 1};
  std::array<int, 2> stride = {0, 0};
  std::array<int, 2> padding = {0, 0};
  bool ceil_mode = false;
  // true: divide by the window clipped to the padded input; false: by its real cells.
  bool count_include_pad = true;
  // When set (non-zero), every window divides by it instead.
  std::optional<int> divisor_override = std::nullopt;
};

class AvgPool2d : public UnaryLayer {
 public:
  // Throws mpicnn::Error on a bad configuration (non-positive sizes, padding > kernel/2,
  // divisor_override of 0).
  explicit AvgPool2d(const AvgPool2dOptions& opt);
  // Square form: AvgPool2d(2), AvgPool2d(3, 1, 1).
  explicit AvgPool2d(int kernel, int stride = 0, int padding = 0, bool ceil_mode = false,
                     bool count_include_pad = true);

  const char* kind() const override { return "AvgPool2d"; }
  const AvgPool2dOptions& options() const { return opt_; }
  Shape output_shape(const Shape& in) const override;  // (N, C, H, W) -> (N, C, OH, OW)
  // out (N, C, OH, OW) = window sum of in (N, C, H, W) / divisor. out must not alias in.
  void forward(Tensor& out, const Tensor& in) override;
  // din (N, C, H, W) '=': zero, then each dout / divisor spread over its window's real cells.
  void backward(Tensor& din, const Tensor& dout, const Tensor& in, const Tensor& out) override;

 private:
  gpu::PoolDesc desc(const Shape& in) const;
  AvgPool2dOptions opt_;
};

}  // namespace mpicnn
