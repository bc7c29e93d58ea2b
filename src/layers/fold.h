// A Conv2d and the eval-mode BatchNorm2d right after it, folded into one convolution for GPU
// inference (opt-in: ExecConfig::fold, core/exec.h): with s = gamma / sqrt(var + eps) per output
// channel, w' = w * s and b' = (b - mean) * s + beta (layers/fold_math.h), then convolution +
// bias (+ a residual) (+ ReLU) in one cuDNN call (kernels/conv2d.cu). The folded weights are a
// copy owned here, made when the model plans or enters eval mode: the model's own weights (its
// checkpoint) are never written. Not a layer of the state dict, and not a CPU path: the CPU engine
// runs Conv2d and BatchNorm2d as they are. On the channels-last typed path (--gpu-layout nhwc)
// the fold is made in float, then rounded once into a copy of the activations' type (KRSC
// filters, as Conv2d's), which the fused call reads with the typed activations.
#pragma once
#include <memory>

#include "core/gpu.h"
#include "core/tensor.h"
#include "layers/batchnorm.h"
#include "layers/conv2d.h"

namespace mpicnn {

class FoldedConv {
 public:
  // conv and bn, already planned on the GPU (their parameters on CUDA), kept by reference: sizes
  // the folded copy (w' as conv.weight, b' (OC)) and readies the cuDNN plan for the fused call.
  // Plan time (allocates). The copy is filled by refresh().
  void plan(Conv2d& conv, BatchNorm2d& bn);
  // w' and b' '=' the fold of the convolution's weights and bias and the BatchNorm's current
  // parameters and running statistics: whenever they may have changed (the module enters eval
  // mode, weights were loaded).
  void refresh();
  // out (N, OC, OH, OW) '=' act(conv(in, w') + b' (+ residual)), act the ReLU when relu; what
  // bn(conv(in)) (+ residual) (then ReLU) gives in eval mode. residual may be null.
  void forward(Tensor& out, const Tensor& in, const Tensor* residual, bool relu);

 private:
  Conv2d* conv_ = nullptr;
  BatchNorm2d* bn_ = nullptr;
  Tensor weight_;  // (OC, IC/groups, KH, KW): w'
  Tensor bias_;    // (OC): b'
  Format format_;  // of the activations (conv's plan): plain, or NHWC of a type
  Tensor typed_weight_, typed_bias_;  // w' and b' in format_'s type (typed path only)
};

}  // namespace mpicnn
