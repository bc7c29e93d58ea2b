// Window geometry shared by MaxPool2d and AvgPool2d: PyTorch's output-size rule, and the
// checks both apply to kernel, stride and padding. Not a layer.
#pragma once
#include <array>
#include <cstdint>
#include <string>

namespace mpicnn {

// One spatial extent of a pooling output as PyTorch computes it:
// floor_or_ceil((in + 2*pad - dilation*(kernel-1) - 1) / stride) + 1, and in ceil mode the
// last window must start inside the input or the left padding. May return <= 0 (too small).
int64_t pool_output_size(int64_t in, int kernel, int stride, int pad, int dilation,
                         bool ceil_mode);

// "3x2" for an {h, w} pair, for messages.
std::string hw_str(const std::array<int, 2>& a);

// Replaces a zero stride by the kernel (PyTorch's stride=None), then checks kernel > 0,
// stride > 0, 0 <= padding <= kernel/2, naming `layer` in the error.
void check_pool_window(const char* layer, const std::array<int, 2>& kernel,
                       std::array<int, 2>& stride, const std::array<int, 2>& padding);

}  // namespace mpicnn
