// Faster R-CNN's RPN head (torchvision 0.14 RPNHead): per feature level, a shared 3x3 conv +
// ReLU, then 1x1 convs to A objectness logits and 4A box deltas per position. The same
// parameters serve every level: each level has its own planned layers (a convolution is
// planned for one input size) viewing level 0's parameters and gradients, so gradients of all
// levels sum into one slab range. Not the proposal logic (anchors, decoding, NMS): rpn.h.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "layers/conv2d.h"
#include "layers/relu.h"
#include "models/module.h"

namespace mpicnn::detect {

class RpnHead {
 public:
  RpnHead(int in_channels, int num_anchors, int levels);

  // Names as torchvision: prefix + "conv.0.0.", "cls_logits.", "bbox_pred." (weight, bias).
  void register_state(ParamStore& store, const std::string& prefix);
  // After the store is allocated (and after every rebinding of it, e.g. a device move): points
  // the other levels' layers at level 0's parameters and gradients. CPU only.
  void share_parameters();
  // torchvision: conv weights normal(std 0.01), biases 0.
  void init(uint64_t seed);
  // Level 0's layers: the ones holding the parameters.
  void for_each_layer(const std::function<void(Layer&, const std::string&)>& fn);
  void set_training(bool training);

  void plan(const std::vector<Shape>& levels, const ExecConfig& cfg);
  // Per level: objectness (N, A, H, W) and box deltas (N, 4A, H, W); views until the next call.
  void forward(const std::vector<Tensor>& features);
  const std::vector<Tensor>& objectness() const { return objectness_; }
  const std::vector<Tensor>& deltas() const { return deltas_; }
  // dfeatures[l] '=' the gradient of level l's features (skipped when undefined); parameter
  // gradients '+=', from the gradients of objectness and deltas of the last forward.
  void backward(std::vector<Tensor>& dfeatures, const std::vector<Tensor>& dobjectness,
                const std::vector<Tensor>& ddeltas);

 private:
  struct Level {
    std::unique_ptr<Leaf<Conv2d>> conv, cls, bbox;
    std::unique_ptr<Leaf<ReLU>> relu;
    Tensor dt, dt2;  // (N, C, H, W): the gradient of the ReLU's output, and scratch
  };
  std::vector<Level> levels_;
  std::string prefix_;
  std::vector<Tensor> objectness_, deltas_;
};

}  // namespace mpicnn::detect
