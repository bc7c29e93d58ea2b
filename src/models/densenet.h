// DenseNet-121 exactly as torchvision 0.14 builds it (names, shapes, state_dict order, default
// initialisation), with num_classes and in_channels from ModelOptions; and its dense block,
// which keeps the block's features in one preallocated buffer instead of concatenating them
// again for every layer. Not the memory-efficient (checkpointing) variant, no dropout.
#pragma once
#include <memory>
#include <vector>

#include "layers/batchnorm.h"
#include "layers/conv2d.h"
#include "layers/relu.h"
#include "models/model.h"
#include "models/module.h"

namespace mpicnn {

// torchvision _DenseBlock of _DenseLayers: layer i reads all features so far (the block input
// and the i new maps before it, in_channels + i * growth channels) and adds `growth` maps:
//   norm1 -> relu1 -> conv1 (1x1, bn_size * growth) -> norm2 -> relu2 -> conv2 (3x3, growth).
// The block output is the channel concatenation of its input and every layer's new maps.
//
// Layout: the features live channel-major, (C, N, H*W), so "all features so far" is a
// contiguous prefix of one buffer. BatchNorm's statistics are per channel over (N, H, W),
// so norm1 runs on the prefix viewed as (1, C, N, H*W), and conv1 (1x1) is one GEMM on it;
// only the bottleneck (bn_size * growth channels) and the new maps are transposed to and from
// NCHW for the 3x3 conv. Backward adds each layer's prefix gradient into one channel-major
// gradient buffer; layers run in reverse, so a layer's slice is complete (every later reader
// has added to it) when its own backward starts.
class DenseBlock : public Module {
 public:
  DenseBlock(int num_layers, int in_channels, int growth, int bn_size);
  ~DenseBlock() override;
  int out_channels() const { return out_channels_; }

  void register_state(ParamStore& store, const std::string& prefix) override;
  void for_each_layer(const std::function<void(Layer&, const std::string&)>& fn) override;
  void set_training(bool training) override;
  Shape plan(const Shape& in, const ExecConfig& cfg) override;
  const Tensor& forward(const Tensor& in) override;
  void backward(Tensor& din, const Tensor& dout) override;

 private:
  struct DenseLayer;
  static constexpr int kConv2Slot = 9;  // block_scratch slot of conv2's output (inference)
  std::vector<std::unique_ptr<DenseLayer>> layers_;
  int in_channels_, growth_, bottleneck_, out_channels_;
  int64_t hw_ = 0, h_ = 0, w_ = 0;  // planned spatial size
  Tensor feat_;       // (C_out, N, H*W): block input, then each layer's new maps
  Tensor grad_;       // (C_out, N, H*W): gradient of feat_
  Tensor out_buf_;    // (N, C_out, H, W): the block output, NCHW
  Tensor out_;        // last forward's view of out_buf_
  Tensor g_prefix_;   // (C_in of the last layer, N, H*W): gradient of one layer's input
  Tensor bottleneck_cm_;  // (bottleneck, N, H*W): conv1 output, then its gradient
  Tensor g_bottleneck_;   // (N, bottleneck, H, W): gradient through conv2, relu2, norm2
  Tensor g_new_;          // (N, growth, H, W): gradient of one layer's new maps
  bool fused_ = false;    // norm1 and norm2 apply relu1 and relu2 (ExecConfig::fusion)
  // A CPU training plan: the layers share one a1 (as an inference plan's), and backward
  // recomputes each layer's from the features and norm1's saved statistics (BatchNorm2d::
  // recompute), one more pass over the prefix instead of every layer's a1 kept (half the
  // block's activation memory).
  bool recompute_a1_ = false;
};

std::unique_ptr<Model> make_densenet(const std::string& name, const ModelOptions& options,
                                     uint64_t seed);

// torchvision's DenseNet init: conv weights kaiming_normal (fan_in, relu), BatchNorm 1/0, the
// classifier's weight as nn.Linear's default and its bias 0.
void init_densenet(Model& model, uint64_t seed);

}  // namespace mpicnn
