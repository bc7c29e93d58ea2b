// AuxNet: the root of a classifier with auxiliary heads (torchvision's Inception v3 and
// GoogLeNet). The trunk is a chain of segments whose last one ends in the main logits; each
// head reads one segment's output and, in training mode only, computes its own logits, which
// the training loss weighs in (see Model::aux_outputs). Not a general graph: heads are leaves
// hanging off the trunk.
#pragma once
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "models/module.h"

namespace mpicnn {

// Parts (segments and heads) are registered in the order added, which must be torchvision's
// state_dict order: segments under the root's own prefix (their children carry the names),
// heads under "NAME.". Backward runs the parts in the reverse of that order, so every part
// registered after another has finished its gradients before that one's backward starts (the
// gradient-ready hook's rule, module.h). That is why a head must be added after the segment it
// reads: its input gradient joins that segment's output gradient just before the segment's
// backward.
class AuxNet : public Module {
 public:
  struct Head {
    std::string name;
    real weight;  // of this head's loss in the training loss: main + sum weight * head
  };

  void add_segment(std::unique_ptr<Sequential> segment);
  // A head reading the output of segment `tap` (already added, not the last).
  void add_head(const std::string& name, real weight, size_t tap, std::unique_ptr<Module> head);

  size_t num_heads() const { return heads_.size(); }
  const Head& head(size_t i) const { return heads_.at(i).info; }
  // Whether the last forward ran the heads (it was in training mode).
  bool heads_ran() const { return heads_ran_; }
  // Head i's logits (N, classes) of the last forward; only when heads_ran().
  const Tensor& head_logits(size_t i) const;

  void register_state(ParamStore& store, const std::string& prefix) override;
  void for_each_layer(const std::function<void(Layer&, const std::string&)>& fn) override;
  void set_training(bool training) override;
  Shape plan(const Shape& in, const ExecConfig& cfg) override;
  // The main logits; in training mode the heads' too (head_logits).
  const Tensor& forward(const Tensor& in) override;
  // din '=' (skipped when undefined), parameter gradients '+=' from the main logits' gradient
  // dout and, when the heads ran, one gradient per head (dheads[i]: (N, classes) of head i);
  // when they did not, dheads must be empty.
  void backward(Tensor& din, const Tensor& dout, std::span<const Tensor* const> dheads);
  // Without head gradients: only after a forward that did not run the heads (eval mode).
  void backward(Tensor& din, const Tensor& dout) override;

 private:
  struct HeadPart {
    Head info;
    size_t tap;
    std::unique_ptr<Module> module;
    Shape in_shape;           // the tapped segment's planned output
    Tensor g_in;              // (N, C, H, W): gradient of the head's input
    const Tensor* out = nullptr;
  };
  struct Part {
    bool head;
    size_t index;
  };
  void segment_backward(size_t i, Tensor& din, const Tensor& dout, bool grad_in);

  std::vector<std::unique_ptr<Sequential>> segments_;
  std::vector<HeadPart> heads_;
  std::vector<Part> parts_;            // registration order
  std::vector<Shape> seg_shapes_;      // planned output of each segment
  std::vector<Tensor> g_seg_;          // gradient of each segment's output but the last
  std::vector<const Tensor*> seg_out_; // the last forward's segment outputs
  bool training_ = true, heads_ran_ = false;
  int64_t batch_ = 0;                  // of the last forward
};

}  // namespace mpicnn
