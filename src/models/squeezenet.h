// SqueezeNet 1.1 exactly as torchvision 0.14 builds it (names, shapes, state_dict order,
// default initialisation), with num_classes, in_channels and the classifier's dropout from
// ModelOptions; and its Fire block. Not SqueezeNet 1.0 (torchvision's other variant).
#pragma once
#include <memory>

#include "layers/concat.h"
#include "layers/conv2d.h"
#include "layers/relu.h"
#include "models/model.h"
#include "models/module.h"

namespace mpicnn {

// torchvision Fire: squeeze = conv1x1(in, s) + ReLU, then expand1x1 = conv1x1(s, e1) + ReLU and
// expand3x3 = conv3x3(s, e3, pad 1) + ReLU side by side, concatenated on channels (e1 + e3).
// ReLUs run in place on their conv's output, as torchvision's inplace=True.
class Fire : public Module {
 public:
  Fire(int in_channels, int squeeze, int expand1x1, int expand3x3);
  int out_channels() const { return e1_ + e3_; }

  void register_state(ParamStore& store, const std::string& prefix) override;
  void for_each_layer(const std::function<void(Layer&, const std::string&)>& fn) override;
  void set_training(bool training) override;
  Shape plan(const Shape& in, const ExecConfig& cfg) override;
  const Tensor& forward(const Tensor& in) override;
  void backward(Tensor& din, const Tensor& dout) override;

 private:
  int e1_, e3_;
  std::unique_ptr<Leaf<Conv2d>> squeeze_, expand1x1_, expand3x3_;
  std::unique_ptr<Leaf<ReLU>> squeeze_relu_, expand1x1_relu_, expand3x3_relu_;
  Concat concat_;
  Tensor out_buf_, out_;        // (N, e1 + e3, H, W): planned buffer, last forward's view
  Tensor g_e1_, g_e3_;          // (N, e1, H, W), (N, e3, H, W): the split output gradient
  Tensor g_s_, g_s3_;           // (N, s, H, W) x2: squeeze-output gradient from each expand
};

std::unique_ptr<Model> make_squeezenet(const std::string& name, const ModelOptions& options,
                                       uint64_t seed);

// torchvision's SqueezeNet init: the final conv (classifier.1) normal(0, 0.01), every other
// conv kaiming_uniform (a = 0, fan_in), all conv biases 0.
void init_squeezenet(Model& model, uint64_t seed);

}  // namespace mpicnn
