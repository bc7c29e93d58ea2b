// Building blocks of torchvision's Inception family (Inception v3, GoogLeNet): BasicConv2d
// (conv without bias, BatchNorm eps 1e-3, ReLU) and Branches, children that read the same input
// and whose outputs are concatenated along channels. Not a general graph: a branch is a module
// (usually a Sequential) from the block input to its own output.
#pragma once
#include <memory>
#include <vector>

#include "layers/concat.h"
#include "layers/conv2d.h"
#include "models/module.h"

namespace mpicnn {

// torchvision's BasicConv2d: "conv" (Conv2d, bias=False), "bn" (BatchNorm2d, eps=0.001), then
// F.relu(inplace=True) (a stateless child here, so the state names are torchvision's).
std::unique_ptr<Sequential> basic_conv2d(int in, int out, Conv2dOptions::Hw kernel,
                                         Conv2dOptions::Hw stride = 1,
                                         Conv2dOptions::Hw padding = 0);

// torch.cat([branch_0(x), branch_1(x), ...], 1). Every branch is registered under the block's
// own prefix, in the order added, so its layers keep torchvision's flat names
// ("Mixed_5b.branch5x5_1.conv.weight"). Backward runs the branches in reverse order (later
// registered parameters finish first, as the gradient-ready hook requires, module.h) and
// sums their input gradients: din '=', parameter gradients '+='.
class Branches : public Module {
 public:
  Branches() = default;
  Module& add(std::unique_ptr<Module> branch);
  int64_t out_channels() const;  // after plan()

  void register_state(ParamStore& store, const std::string& prefix) override;
  void for_each_layer(const std::function<void(Layer&, const std::string&)>& fn) override;
  void set_training(bool training) override;
  Shape plan(const Shape& in, const ExecConfig& cfg) override;
  const Tensor& forward(const Tensor& in) override;
  void backward(Tensor& din, const Tensor& dout) override;

 private:
  std::vector<std::unique_ptr<Module>> branches_;
  Concat concat_;
  Shape in_shape_;                   // planned input (N, C, H, W)
  std::vector<Shape> out_shapes_;    // each branch's planned output
  std::vector<const Tensor*> outs_;  // the last forward's branch outputs
  std::vector<Tensor> g_out_;        // (N, C_i, H', W'): gradient of branch i's output
  std::vector<Tensor> g_views_;      // the last backward's views of g_out_
  std::vector<Tensor*> g_ptrs_;      // pointers to g_views_, for Concat::backward
  Tensor g_in_;                      // (N, C, H, W): one branch's input gradient
  Tensor out_buf_, out_;             // (N, sum C_i, H', W') and the last forward's view
};

}  // namespace mpicnn
