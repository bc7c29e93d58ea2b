// ResNet-18/34/50 exactly as torchvision 0.14 builds them (names, shapes, order, default
// initialisation), with num_classes and in_channels options. Also the blocks, for the
// CIFAR-style ResNet in small.cpp.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "layers/add.h"
#include "layers/batchnorm.h"
#include "layers/conv2d.h"
#include "layers/fold.h"
#include "layers/relu.h"
#include "models/model.h"
#include "models/module.h"

namespace mpicnn {

// torchvision BasicBlock (expansion 1) or Bottleneck (expansion 4). The residual is added
// into the last BatchNorm's output in place, then ReLU runs in place, as torchvision does.
class ResidualBlock : public Module {
 public:
  // bottleneck: conv1x1(in, width) -> conv3x3(width, width, stride) -> conv1x1(width, 4*width);
  // else conv3x3(in, width, stride) -> conv3x3(width, width). A downsample (conv1x1 + BN) is
  // added when the stride or the channel count changes.
  ResidualBlock(int in_channels, int width, int stride, bool bottleneck);
  int out_channels() const { return out_channels_; }

  void register_state(ParamStore& store, const std::string& prefix) override;
  void for_each_layer(const std::function<void(Layer&, const std::string&)>& fn) override;
  void set_training(bool training) override;
  Shape plan(const Shape& in, const ExecConfig& cfg) override;
  const Tensor& forward(const Tensor& in) override;
  void backward(Tensor& din, const Tensor& dout) override;

 private:
  // conv_i / bn_i pairs of the main branch (2 or 3), torchvision names conv1, bn1, ...
  std::vector<std::unique_ptr<Leaf<Conv2d>>> convs_;
  std::vector<std::unique_ptr<Leaf<BatchNorm2d>>> bns_;
  std::vector<std::unique_ptr<Leaf<ReLU>>> relus_;  // after bn_i, i < last (in place)
  std::unique_ptr<Sequential> downsample_;
  Leaf<Conv2d>* downsample_conv_ = nullptr;  // downsample_'s first child
  ReLU out_relu_;
  // torchvision's one `relu` of the block ("layer1.0.relu."): the profile's name for the
  // unfused ReLUs and the residual add + ReLU.
  std::string relu_name_;
  int out_channels_;
  Tensor in_, out_;  // last forward's input and output (a view of bn_last's)
  // Gradient buffers: the block output's, the conv outputs' (then the input's from the
  // downsample), the mid inputs'. On the CPU every block shares one set (block_scratch in
  // module.h); on the GPU each block has its own (block_scratch::Buffer).
  enum { kGradOut, kGradA, kGradB, kGradSlots };
  // Inference plans (module.h's plan_mode): outputs in shared slots. conv1 and the
  // downsample's conv write A (conv1's output is dead once conv2 has read it), a bottleneck's
  // conv2 writes B, the last conv (and its BatchNorm, in place: the block's output) one of two
  // output slots by the block's parity, so that it never overwrites the block's input.
  enum { kFwdA = kGradSlots, kFwdB, kFwdOut0, kFwdOut1 };
  block_scratch::Buffer grads_[kGradSlots];
  Tensor grad_buffer(int slot, Shape shape) const;  // shape with the last forward's batch
  Shape in_shape_;
  // Fusion (ExecConfig::fusion): bn_i applies relu_i, and bn_last the residual add and the
  // block's ReLU, in their own passes.
  bool fused_ = false;
  // Folded inference (layers/fold.h; GPU, eval mode, ExecConfig::fold): folds_[i] is
  // conv_i with bn_i folded in, run with relu_i, the last one with the residual add and the
  // block's ReLU: one cuDNN call per convolution (the downsample folds in its Sequential).
  std::vector<FoldedConv> folds_;
  bool training_ = true;
  bool folded_ran_ = false;  // the last forward ran folds (no backward then)
  const Tensor& forward_folded(const Tensor& in);
};

// torchvision's ResNet up to layer4 (`name`: resnet18/34/50): the named children conv1, bn1,
// relu (in place), maxpool, layer1 .. layer4 of its root, for the classifier and the detection
// backbone; stage_channels (if given) gets each stage's output channels.
std::vector<std::pair<std::string, std::unique_ptr<Module>>> make_resnet_trunk(
    const std::string& name, int in_channels, std::vector<int>* stage_channels = nullptr);

// torchvision resnet18/34/50 ("resnet18", ...).
std::unique_ptr<Model> make_resnet(const std::string& name, const ModelOptions& options,
                                   uint64_t seed);

// torchvision's ResNet init: conv weights kaiming_normal(fan_out, relu), BatchNorm weight 1 and
// bias 0, Linear as nn.Linear's default.
void init_resnet(Model& model, uint64_t seed);

}  // namespace mpicnn
