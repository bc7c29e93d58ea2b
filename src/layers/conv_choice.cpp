// The table of convolution implementations (see conv_choice.h).
#include "layers/conv_choice.h"

#include "core/check.h"
#include "layers/conv_direct.h"
#include "layers/winograd.h"

namespace mpicnn {

const char* conv_impl_name(ConvImpl impl) {
  switch (impl) {
    case ConvImpl::kCudnn: return "cudnn";
    case ConvImpl::kDirect: return "direct";
    case ConvImpl::kDirectForward: return "direct forward, im2col weight gradient";
    case ConvImpl::kWinograd: return "winograd";
    case ConvImpl::kIm2col: return "im2col";
  }
  return "?";
}

ConvChoice choose_conv(const ConvGeometry& g, int groups, const ExecConfig& cfg) {
  if (cfg.device == Device::CUDA) return {ConvImpl::kCudnn, nullptr};
  const bool fp32 = cfg.precision == Precision::kFp32;
  CHECK(fp32 || cfg.precision == Precision::kBf16, "Conv2d: ", precision_name(cfg.precision),
        " on the CPU (fp32 or bf16)");
  ConvChoice c;
  c.why_not_direct = DirectConv::why_not(g, groups, !fp32, cfg);
  if (c.why_not_direct == nullptr)
    c.impl = fp32 || DirectConv::bf16_weight_grad_fits(g, cfg.isa) ? ConvImpl::kDirect : ConvImpl::kDirectForward;
  else if (fp32 && cfg.conv == ConvAlgorithm::kWinograd && winograd_fits(g, groups))
    c.impl = ConvImpl::kWinograd;
  return c;
}

}  // namespace mpicnn
