// The cuDNN convolution (see conv_cudnn.h): host code calling into the GPU backend.
#include "layers/conv_cudnn.h"

namespace mpicnn {

CudnnEngine::CudnnEngine(const ConvSpec& s, const ExecConfig& cfg)
    : s_(s), precision_(cfg.precision) {
  const ConvGeometry& g = s.geo;
  format_ = cfg.format_for({s.batch, g.channels, g.height, g.width});
  plan_ = gpu::backend().conv_plan(g, s.batch, int(s.out_channels), s.groups, format_,
                                   cfg.precision, cfg.deterministic);
  if (!format_.plain()) {
    const Shape w = {s.out_channels, g.channels / s.groups, g.kernel_h, g.kernel_w};
    typed_weight_ = Tensor::empty(w, Device::CUDA, format_);
    typed_grad_ = Tensor::empty(w, Device::CUDA, format_);
  }
}

std::string CudnnEngine::note() const {
  return "cuDNN " + std::string(format_name(format_)) + ", " + precision_name(precision_);
}

void CudnnEngine::forward(Tensor& out, const Tensor& in, const Tensor& weight, const Tensor* bias) {
  const int64_t N = in.size(0);
  gpu::Backend& be = gpu::backend();
  if (format_.plain()) {
    be.conv_forward(*plan_, out.data(), in.data(), weight.data(), bias ? bias->data() : nullptr,
                    int(N));
    return;
  }
  // The typed KRSC copy of this step's weights, then the bias.
  const Shape& w = typed_weight_.shape();
  be.convert(typed_weight_.raw(), format_, weight.data(), Format{}, w[0], w[1], w[2], w[3],
             /*accumulate=*/false);
  be.conv_forward(*plan_, out.raw(), in.raw(), typed_weight_.raw(), nullptr, int(N));
  if (bias)
    be.add_bias_rows(format_.elem, out.raw(), bias->data(), N * s_.geo.out_plane(),
                     s_.out_channels);
}

void CudnnEngine::backward(Tensor& din, Tensor* gw, Tensor* gb, const Tensor& dout,
                           const Tensor& in, const Tensor& weight) {
  const int64_t N = in.size(0);
  gpu::Backend& be = gpu::backend();
  if (format_.plain()) {
    be.conv_backward(*plan_, din.defined() ? din.data() : nullptr, gw ? gw->data() : nullptr,
                     gb ? gb->data() : nullptr, dout.data(), in.data(), weight.data(), int(N));
    return;
  }
  // typed_weight_ still holds this step's weights, converted by forward. The weight gradient is
  // written fresh in the activations' type, then added, converted, into the float slab; the
  // bias gradient is summed in float straight into it.
  be.conv_backward(*plan_, din.defined() ? din.raw() : nullptr, gw ? typed_grad_.raw() : nullptr,
                   nullptr, dout.raw(), in.raw(), typed_weight_.raw(), int(N),
                   /*accumulate_params=*/false);
  if (gw) {
    const Shape& w = typed_grad_.shape();
    be.convert(gw->data(), Format{}, typed_grad_.raw(), format_, w[0], w[1], w[2], w[3],
               /*accumulate=*/true);
  }
  if (gb) be.conv_bias_grad(format_.elem, gb->data(), dout.raw(), N * s_.geo.out_plane(),
                            s_.out_channels);
}

}  // namespace mpicnn
