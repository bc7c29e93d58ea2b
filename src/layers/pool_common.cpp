// Pooling window geometry shared by MaxPool2d and AvgPool2d.
#include "layers/pool_common.h"

#include "core/check.h"

namespace mpicnn {

int64_t pool_output_size(int64_t in, int kernel, int stride, int pad, int dilation,
                         bool ceil_mode) {
  const int64_t num = in + 2 * int64_t(pad) - int64_t(dilation) * (kernel - 1) - 1 +
                      (ceil_mode ? stride - 1 : 0);
  int64_t q = num / stride;  // stride > 0; round toward -inf like PyTorch's div_rtn
  if (num % stride != 0 && num < 0) --q;
  int64_t out = q + 1;
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

std::string hw_str(const std::array<int, 2>& a) {
  return std::to_string(a[0]) + "x" + std::to_string(a[1]);
}

void check_pool_window(const char* layer, const std::array<int, 2>& kernel,
                       std::array<int, 2>& stride, const std::array<int, 2>& padding) {
  for (int i = 0; i < 2; ++i)
    if (stride[i] == 0) stride[i] = kernel[i];
  CHECK(kernel[0] > 0 && kernel[1] > 0, layer, ": kernel ", hw_str(kernel), " must be positive");
  CHECK(stride[0] > 0 && stride[1] > 0, layer, ": stride ", hw_str(stride), " must be positive");
  CHECK(padding[0] >= 0 && padding[1] >= 0, layer, ": padding ", hw_str(padding),
        " must not be negative");
  CHECK(padding[0] <= kernel[0] / 2 && padding[1] <= kernel[1] / 2, layer, ": padding ",
        hw_str(padding), " must be at most half the kernel ", hw_str(kernel));
}

}  // namespace mpicnn
