// Which implementation computes a convolution: the one table, a function of the layer's
// geometry and groups and the execution config (device, precision, layout, ISA, overrides:
// core/exec.h). Conv2d::plan asks it once and builds what it names (make_conv_engine: the
// classes of conv_engine.h); --explain-plan prints the choice and, off the direct kernels, why
// (Conv2d::plan_note). How the im2col path then runs its chunks (side by side for small layers,
// one GEMM per image for large bf16 1x1 layers) is that path's own plan (conv_im2col.h).
#pragma once
#include <memory>

#include "core/exec.h"
#include "layers/conv_engine.h"
#include "layers/im2col.h"

namespace mpicnn {

enum class ConvImpl : uint8_t {
  kCudnn,          // CUDA: cuDNN, on NCHW float32 or the config's NHWC format (kernels/conv2d.cu)
  kDirect,         // CPU: the direct kernels for all three passes (layers/conv_direct.h), float32,
                   // or bf16 where DirectConv::bf16_weight_grad_fits
  kDirectForward,  // CPU bf16: the direct kernels for forward and the input gradient, the weight
                   // gradient on im2col's bf16 GEMMs
  kWinograd,       // CPU float32: Winograd F(2x2,3x3) forward and input gradient
                   // (layers/winograd.h), the weight gradient on im2col + GEMM
  kIm2col,         // CPU: im2col + GEMM (float32 or bf16; layers/conv_im2col.h)
};

const char* conv_impl_name(ConvImpl impl);

struct ConvChoice {
  ConvImpl impl = ConvImpl::kIm2col;
  // On the CPU, why not the direct kernels (DirectConv::why_not), in a few words; nullptr on
  // them and on the GPU.
  const char* why_not_direct = nullptr;
};

// The implementation for a convolution of geometry g and `groups` groups under cfg. An Error
// for a precision the device does not compute convolutions in (the CPU: fp32 and bf16).
// Rules, in order: CUDA tensors take cuDNN; on the CPU the direct kernels where DirectConv::fits
// (all three passes, or in bf16 forward and the input gradient where the bf16 weight gradient
// does not fit); else Winograd where asked for (MPICNN_CONV=winograd) and it fits (float32, 3x3
// stride 1, ungrouped); else im2col.
ConvChoice choose_conv(const ConvGeometry& g, int groups, const ExecConfig& cfg);

// The implementation `impl` names, planned for s under cfg (conv_engines.cpp).
std::unique_ptr<ConvEngine> make_conv_engine(ConvImpl impl, const ConvSpec& s,
                                             const ExecConfig& cfg);

}  // namespace mpicnn
