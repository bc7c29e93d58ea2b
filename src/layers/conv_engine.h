// How a convolution runs: one small class per implementation behind one interface. Conv2d
// asks conv_choice.h's table which implementation takes its layer, builds it with
// make_conv_engine (planned for one input shape: workspaces, chunks, kernels, descriptors), then
// hands it each pass with the layer's parameters. The implementations:
//   CudnnEngine          CUDA: cuDNN on NCHW float32 or the config's NHWC format (conv_cudnn.cpp)
//   DirectEngine         CPU: the direct kernels for all three passes (conv_engines.cpp)
//   DirectForwardEngine  CPU bf16: the direct kernels for forward and the input gradient, the
//                        weight gradient on an Im2colEngine (conv_engines.cpp)
//   WinogradEngine       CPU float32: Winograd forward and input gradient, the weight gradient
//                        on an Im2colEngine (conv_engines.cpp)
//   Im2colEngine         CPU: im2col + GEMM, float32 or bf16 (conv_im2col.h)
// CPU implementations share one workspace per thread (conv_workspace).
#pragma once
#include <memory>
#include <string>

#include "core/exec.h"
#include "core/tensor.h"
#include "layers/im2col.h"

namespace mpicnn {

class Im2colEngine;
class CudnnEngine;

// What every implementation plans from: the planned input's geometry and batch, the layer's
// output channels and groups.
struct ConvSpec {
  ConvGeometry geo;
  int64_t batch = 1;  // planned images: the passes take any batch up to this
  int64_t out_channels = 1;
  int groups = 1;
};

class ConvEngine {
 public:
  virtual ~ConvEngine() = default;
  // out (N, OC, OH, OW) '=' conv(in (N, IC, H, W), weight (OC, IC/groups, KH, KW)) + bias
  // (OC; null without).
  virtual void forward(Tensor& out, const Tensor& in, const Tensor& weight,
                       const Tensor* bias) = 0;
  // din '=' the input gradient (skipped when undefined); gw and gb '+=' the weight and bias
  // gradients (each skipped when null), from dout.
  virtual void backward(Tensor& din, Tensor* gw, Tensor* gb, const Tensor& dout,
                        const Tensor& in, const Tensor& weight) = 0;
  // How it runs, in a few words (--explain-plan, Conv2d::plan_note).
  virtual std::string note() const = 0;
  // Its im2col part (all of Im2colEngine, the weight gradient of the composites) and its cuDNN
  // plan, where it has them: what tests and folded inference (layers/fold.h) look at.
  virtual const Im2colEngine* im2col() const { return nullptr; }
  virtual const CudnnEngine* cudnn() const { return nullptr; }
};

// Below this many elements a CPU engine's loop runs on one thread (fork/join would cost more).
constexpr int64_t kConvParallelMin = 1 << 15;

// This thread's convolution workspace, at least `floats`: every CPU convolution's columns,
// rows, packed images and weights take turns in it (a layer's are dead once its pass has run).
// Per thread, because tests run several ranks' models as threads of one process; plans size it
// so that a step allocates nothing.
real* conv_workspace(int64_t floats);

// gb (OC) += dout (N, OC, OH, OW) summed over images and pixels, in double per channel.
void conv_bias_grad(Tensor& gb, const Tensor& dout);

}  // namespace mpicnn
