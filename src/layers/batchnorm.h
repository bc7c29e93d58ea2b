// BatchNorm2d as torch.nn.BatchNorm2d (affine, track_running_stats): training mode normalises
// with batch statistics and updates running stats (momentum, unbiased variance); eval mode
// uses the running stats. Statistics are per process: under MPI each rank normalises its own
// batch, as PyTorch DistributedDataParallel does (no SyncBatchNorm here).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "layers/layer.h"

namespace mpicnn {

class BatchNorm2d : public UnaryLayer {
 public:
  explicit BatchNorm2d(int channels, real eps = real(1e-5), real momentum = real(0.1));
  const char* kind() const override { return "BatchNorm2d"; }
  // forward may write its input (out == in): inference plans run it in place (module.h).
  static constexpr bool kForwardMayAlias = true;
  void register_state(ParamStore& store, const std::string& prefix) override;
  void reset_parameters(uint64_t seed) override;  // weight 1, bias 0, mean 0, var 1, count 0
  Shape output_shape(const Shape& in) const override { return in; }
  // Places the saved statistics on the model's device.
  void plan(const Shape& in, const ExecConfig& cfg) override;
  void forward(Tensor& out, const Tensor& in) override;  // (N, C, H, W) -> (N, C, H, W)
  // out = relu(bn(in) + residual), in one pass: a residual block's last BatchNorm, its add and
  // its ReLU fused (ExecConfig::fusion). backward stays the plain BatchNorm's: the block masks
  // the gradient itself, since the residual branch needs the masked gradient too.
  void forward(Tensor& out, const Tensor& in, const Tensor& residual);
  // din '=' (may alias dout), grad_weight and grad_bias '+='. With a fused ReLU, dout is the
  // gradient of the ReLU's output (masked here by out > 0).
  void backward(Tensor& din, const Tensor& dout, const Tensor& in, const Tensor& out) override;
  // dacc '+=' the input gradient (dacc apart from dout, which may be overwritten): on the CPU
  // in one pass over dacc, each element one fused multiply-add; elsewhere backward into dout
  // and an accumulate. DenseNet sums its layers' input gradients so.
  void backward_add(Tensor& dacc, Tensor& dout, const Tensor& in, const Tensor& out);

  // Fusion (ExecConfig::fusion): forward applies the ReLU that follows this layer (out =
  // relu(bn(in))) and backward takes that ReLU's output gradient, so the ReLU layer itself is
  // skipped.
  void set_fused_relu(bool on) { fused_relu_ = on; }
  bool fused_relu() const { return fused_relu_; }
  // bf16 input (CPU only; set before plan): forward rounds its input to bfloat16 (core/half.h,
  // as PyTorch's bf16 autocast stores a convolution's output), normalises the rounded values
  // and keeps them, half the bytes of the float32 input, for backward, which reads that copy
  // and never `in`. So a module may run it in place over its convolution's output and keep
  // one float32 buffer where there were two: --precision bf16 training (bf16_batchnorm_input).
  void set_bf16_input(bool on) { bf16_input_ = on; }
  bool bf16_input() const { return bf16_input_; }
  // out = the last forward's output again, from its input `in` (unchanged since) and the
  // statistics it saved, bit for bit (no residual; float32 input on the CPU): DenseNet
  // recomputes its layers' first BatchNorm outputs in backward instead of keeping them.
  void recompute(Tensor& out, const Tensor& in) const;

  int channels() const { return channels_; }
  // The statistics of the last forward, which backward uses (tests of the GPU's math).
  const Tensor& saved_mean() const { return saved_mean_; }
  const Tensor& saved_invstd() const { return saved_invstd_; }
  real eps() const { return eps_; }
  real momentum() const { return momentum_; }
  // --freeze-bn: normalise with the running statistics and leave them as they are, also in
  // training mode (as eval mode does); the affine parameters still train unless frozen.
  void set_use_running_stats(bool on) { use_running_stats_ = on; }
  bool use_running_stats() const { return use_running_stats_; }
  // torchvision's FrozenBatchNorm2d (detection backbones): the running statistics always, and
  // no num_batches_tracked in the state dict. Before register_state.
  void set_frozen_batchnorm() {
    use_running_stats_ = true;
    count_in_state_ = false;
  }

  Tensor weight, bias, grad_weight, grad_bias;  // (C)
  Tensor running_mean, running_var;             // (C)
  int64_t num_batches_tracked = 0;

 private:
  int channels_;
  real eps_, momentum_;
  // Statistics of the last forward, used by backward: batch stats in training mode, running
  // stats in eval mode. Sized once (C) in the constructor.
  Tensor saved_mean_, saved_invstd_;  // (C)
  bool saved_training_ = true;
  bool use_running_stats_ = false;
  bool count_in_state_ = true;  // num_batches_tracked is a buffer of the state dict
  bool fused_relu_ = false;
  bool bf16_input_ = false;
  std::shared_ptr<void> x16_;  // the rounded input (bf16 words, NCHW) when bf16_input_
  int64_t x16_numel_ = 0;      // its planned size

  // out = bn(in) (+ residual) (then relu), statistics as forward documents.
  void forward_impl(Tensor& out, const Tensor& in, const Tensor* residual, bool relu);
  // din '=' (or, with add, '+=') the input gradient; parameter gradients '+='.
  void backward_impl(Tensor& din, const Tensor& dout, const Tensor& in, const Tensor& out,
                     bool add);
};

}  // namespace mpicnn
