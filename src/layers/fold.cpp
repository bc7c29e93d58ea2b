// FoldedConv (see fold.h): checks and calls into the GPU backend (kernels/fold.cu for the fold,
// kernels/conv2d.cu for the fused convolution). Host code only; no folding math of its own.
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
}

void FoldedConv::forward(Tensor& out, const Tensor& in, const Tensor* residual, bool relu) {
  CHECK(conv_, "folded convolution: forward before plan()");
  const Shape want = conv_->output_shape(in.shape());
  CHECK(out.shape() == want, "folded convolution: out ", out.shape().str(), ", expected ",
        want.str());
  CHECK(!residual || residual->shape() == want, "folded convolution: residual ",
        residual ? residual->shape().str() : "", " vs out ", want.str());
  CHECK(on_gpu("folded convolution", {&out, &in, residual}),
        "folded convolution: a GPU path, called with CPU tensors");
  gpu::backend().conv_bias_act_forward(*conv_->gpu_plan(), out.data(), in.data(), weight_.data(),
                                       bias_.data(), residual ? residual->data() : nullptr, relu,
                                       int(in.size(0)));
}

}  // namespace mpicnn
