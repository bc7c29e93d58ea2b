// FoldedConv (see fold.h): checks and calls into the GPU backend (kernels/fold.cu for the fold,
// kernels/format.cu for the typed copy, kernels/conv2d.cu for the fused convolution). Host code
// only; no folding math of its own.
#include "layers/fold.h"

#include "core/check.h"

namespace mpicnn {

void FoldedConv::plan(Conv2d& conv, BatchNorm2d& bn) {
  CHECK(conv.weight.device() == Device::CUDA && bn.weight.device() == Device::CUDA &&
            conv.gpu_plan(),
        "folded convolution: a GPU inference path, planned on the CPU");
  const int oc = conv.options().out_channels;
  CHECK(bn.channels() == oc, "folded convolution: BatchNorm2d(", bn.channels(),
        ") after a convolution of ", oc, " output channels");
  conv_ = &conv;
  bn_ = &bn;
  weight_ = Tensor::empty(conv.weight.shape(), Device::CUDA);
  bias_ = Tensor::empty({oc}, Device::CUDA);
  format_ = conv.gpu_format();
  typed_weight_ = typed_bias_ = Tensor();
  if (!format_.plain()) {
    typed_weight_ = Tensor::empty(conv.weight.shape(), Device::CUDA, format_);
    typed_bias_ = Tensor::empty({oc}, Device::CUDA, Format{format_.elem, Order::NCHW});
  }
  gpu::backend().conv_bias_act_plan(*conv.gpu_plan());
}

void FoldedConv::refresh() {
  CHECK(conv_, "folded convolution: refresh before plan()");
  const int64_t oc = weight_.size(0);
  gpu::backend().fold_conv_bn(weight_.data(), bias_.data(), conv_->weight.data(),
                              conv_->bias.defined() ? conv_->bias.data() : nullptr,
                              bn_->weight.data(), bn_->bias.data(), bn_->running_mean.data(),
                              bn_->running_var.data(), float(bn_->eps()), oc,
                              weight_.numel() / oc);
  if (format_.plain()) return;
  const Shape& w = weight_.shape();
  gpu::backend().convert(typed_weight_.raw(), format_, weight_.data(), Format{}, w[0], w[1], w[2],
                         w[3], /*accumulate=*/false);
  gpu::backend().convert(typed_bias_.raw(), typed_bias_.format(), bias_.data(), Format{}, 1, oc,
                         1, 1, false);
}

void FoldedConv::forward(Tensor& out, const Tensor& in, const Tensor* residual, bool relu) {
  CHECK(conv_, "folded convolution: forward before plan()");
  const Shape want = conv_->output_shape(in.shape());
  CHECK(out.shape() == want, "folded convolution: out ", out.shape().str(), ", expected ",
        want.str());
  CHECK(!residual || residual->shape() == want, "folded convolution: residual ",
        residual ? residual->shape().str() : "", " vs out ", want.str());
  CHECK(on_gpu_as("folded convolution", format_, {&out, &in, residual}),
        "folded convolution: a GPU path, called with CPU tensors");
  const bool typed = !format_.plain();
  gpu::backend().conv_bias_act_forward(
      *conv_->gpu_plan(), out.raw(), in.raw(), typed ? typed_weight_.raw() : weight_.raw(),
      typed ? typed_bias_.raw() : bias_.raw(), residual ? residual->raw() : nullptr, relu,
      int(in.size(0)));
}

}  // namespace mpicnn
