// ResNet + feature pyramid backbone of Faster R-CNN, as torchvision 0.14's resnet_fpn_backbone
// builds it (names under "backbone.": body.conv1 ... body.layer4, fpn.inner_blocks.i.0,
// fpn.layer_blocks.i.0), with frozen BatchNorm and trainable_layers. Forward gives the five
// levels "0", "1", "2", "3", "pool" (strides 4, 8, 16, 32, 64); backward takes a gradient for
// each. Not a Module: it has five outputs; the detection model that owns it is one.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "layers/conv2d.h"
#include "layers/maxpool2d.h"
#include "models/module.h"

namespace mpicnn::detect {

class ResNetFpn {
 public:
  static constexpr int kLevels = 5;  // "0", "1", "2", "3", "pool"

  // body: "resnet18", "resnet34" or "resnet50"; trainable_layers 0..5 counts the body's stages
  // that train, from layer4 down to conv1 (torchvision's default 3: layer2-4). With
  // frozen_batchnorm every BatchNorm is frozen (running statistics, affine parameters fixed),
  // as FrozenBatchNorm2d, torchvision's choice over pretrained weights; without it (its choice
  // from random weights, with all 5 stages trained) they are ordinary BatchNorm2d.
  ResNetFpn(const std::string& body, int trainable_layers, int out_channels = 256,
            bool frozen_batchnorm = true);

  // Declares the parameters as prefix + torchvision's names, in its state_dict order.
  void register_state(ParamStore& store, const std::string& prefix);
  void for_each_layer(const std::function<void(Layer&, const std::string&)>& fn);
  // Freezes what torchvision does not train: every BatchNorm and the stages below
  // trainable_layers (their layers compute no parameter gradients). After allocate().
  void freeze(ParamStore& store);
  // Initialisation as torchvision: the body as ResNet's, FPN convs kaiming_uniform(a=1), bias 0.
  void init(uint64_t seed);
  void set_training(bool training);

  // Sizes every buffer for images up to `in` (N, 3, H, W); returns the levels' shapes.
  std::vector<Shape> plan(const Shape& in, const ExecConfig& cfg);
  // The five levels (N, out_channels, H_l, W_l) of `in`; views valid until the next forward.
  const std::vector<Tensor>& forward(const Tensor& in);
  // dlevels: the gradient of each level of the last forward. Parameter gradients '+=', din '='
  // (skipped when undefined: the body's backward then stops at the lowest trainable stage).
  void backward(Tensor& din, const std::vector<Tensor>& dlevels);

  int out_channels() const { return out_channels_; }

 private:
  std::string prefix_;
  int trainable_layers_;
  bool frozen_batchnorm_;
  int out_channels_;
  std::unique_ptr<Sequential> stem_;                  // conv1, bn1, relu, maxpool
  std::vector<std::unique_ptr<Sequential>> stages_;   // layer1 .. layer4
  std::vector<std::unique_ptr<Leaf<Conv2d>>> inner_;  // 1x1 lateral convs, per stage
  std::vector<std::unique_ptr<Leaf<Conv2d>>> outer_;  // 3x3 output convs, per stage
  std::unique_ptr<Leaf<MaxPool2d>> pool_;             // LastLevelMaxPool: 1x1, stride 2

  Tensor in_;
  std::vector<Tensor> c_;       // stage outputs (views of the stages' buffers)
  std::vector<Tensor> levels_;  // the five outputs
  // Backward buffers (planned): the gradient of each merged map, of each stage's output and
  // of each stage's input (dx_[0]: the stem's output).
  std::vector<Tensor> dmerged_, dc_, dx_;
  Tensor dlast_;  // the gradient of level "3" with the pool's share added
};

// out (N, C, OH, OW) '=' or '+=' (accumulate) F.interpolate(in (N, C, H, W), size=(OH, OW),
// mode="nearest") with PyTorch's source index rule.
void upsample_nearest(Tensor& out, const Tensor& in, bool accumulate);
// din (N, C, H, W) '+=' the adjoint of upsample_nearest of dout (N, C, OH, OW).
void upsample_nearest_backward(Tensor& din, const Tensor& dout);

}  // namespace mpicnn::detect
