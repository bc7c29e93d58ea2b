// Module: a node of a model's tree (torchvision's nn.Module shape): it names its parameters
// under a prefix, plans its own output buffer once per batch size, and runs forward and
// backward. Leaf wraps one layer; Sequential chains children named "0", "1", ... as
// torchvision does. Blocks with branches (ResNet, Fire, DenseNet) write their own
// forward/backward in their model files. Not an autograd graph: every backward is explicit.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/profile.h"
#include "core/tensor.h"
#include "layers/layer.h"
#include "layers/params.h"

namespace mpicnn {

class BatchNorm2d;

// Gradient-ready hook, for overlapping the gradient allreduce with backward (src/dist): while
// Model::backward runs with a hook set, every Sequential calls it after each child's backward
// with an offset such that every parameter gradient at grad-slab offset >= it is final. Valid
// because a Sequential's children are registered in order and run backward in reverse, and
// every block that holds a Sequential (ResidualBlock's downsample) registers it last, so all
// parameters after a Sequential's range are final before its backward starts. A block that
// breaks this (a Sequential child registered before parameters its backward finishes later)
// must clear detail::grad_ready_hook around that child. Blocks without Sequential children
// (Fire, DenseBlock) report nothing inside: their parent reports when they finish.
using GradReadyFn = std::function<void(int64_t first_ready_offset)>;
namespace detail {
extern thread_local const GradReadyFn* grad_ready_hook;  // null outside a hooked backward
}

class Module {
 public:
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  virtual ~Module() = default;

  // Declare parameters and buffers as prefix + torchvision names, in state_dict order.
  virtual void register_state(ParamStore& store, const std::string& prefix) = 0;
  // Visit every layer with its full name prefix ("layer1.0.conv1."), in registration order.
  virtual void for_each_layer(const std::function<void(Layer&, const std::string&)>& fn) = 0;
  // Whether any of its layers has parameters that train (not frozen: Layer::trainable).
  bool has_trainable_layer();
  virtual void set_training(bool training) = 0;
  // Size the output buffer (and any internal ones) for inputs up to `in`, running as cfg says
  // (core/exec.h); returns the output shape. Called outside the training step; forward then
  // takes any batch up to in[0].
  virtual Shape plan(const Shape& in, const ExecConfig& cfg) = 0;
  // Output for `in`, a view into this module's planned buffer (or `in` itself for in-place
  // modules). `in` must stay untouched until the matching backward.
  virtual const Tensor& forward(const Tensor& in) = 0;
  // din '=' (skipped when undefined), parameter gradients '+='. dout is the gradient of the
  // last forward's output; din must not alias dout unless the module says it may.
  virtual void backward(Tensor& din, const Tensor& dout) = 0;
  // Whether forward gives (N, num_classes) logits, as a classifier does; the detector
  // (detect/faster_rcnn.h) gives its losses instead, and Model::plan does not check the shape.
  virtual bool outputs_logits() const { return true; }
};

// Backward buffers that blocks with branches (ResidualBlock) share: a block needs its gradient
// buffers only while its own backward runs, and blocks run backward one after another, never
// inside each other, so one buffer per slot serves every block of the thread (planned models
// run as threads of one process in the tests, hence per thread). plan() calls reserve() (which
// allocates, growing the slot to the largest block's need); backward takes view()s of it. CPU
// only: a GPU block keeps its own buffers (device memory must not outlive the backend).
// Inference plans also put forward outputs here (ExecConfig::inference); views are taken at run
// time, after every reserve() of the plan. Slots by user: ResidualBlock 0-6 (resnet.h), DenseBlock
// 9 (densenet.h), Sequential kSequential0 + 2 * depth + 0 or 1 (its two gradient buffers, shared by
// every Sequential nested as deep: one runs backward inside another only from a deeper level).
namespace block_scratch {
inline constexpr int kSequential0 = 10;
void reserve(int slot, int64_t floats);
Tensor view(int slot, const Shape& shape);  // the slot's first shape.numel() floats
// A module's backward buffer: slot `slot` on the CPU, a tensor of its own on the GPU.
// The floats a Buffer needs for a view of `shape` in cfg's format for it (fewer than
// shape.numel() for the GPU's 16-bit activations): Buffer::plan's unit.
int64_t floats_for(const Shape& shape, const ExecConfig& cfg);
class Buffer {
 public:
  // Sized for `floats` floats; none when floats is 0 or the plan is inference-only.
  void plan(int slot, int64_t floats, const ExecConfig& cfg);
  // Its first shape.numel() elements, in cfg's format for that shape as the plan had it (the
  // GPU's typed activations: several formats share the buffer's bytes).
  Tensor view(const Shape& shape) const;
 private:
  int slot_ = -1;  // -1: own_
  Tensor own_;
  Format format_;  // cfg.activations when planned
};
}  // namespace block_scratch

// One layer and its output buffer. With in_place (ReLU, Dropout, as torchvision's
// inplace=True) the output is the input tensor itself, rewritten.
template <class L>
class Leaf : public Module {
 public:
  template <class... Args>
  explicit Leaf(Args&&... args) : layer(std::forward<Args>(args)...) {}

  Leaf& in_place(bool on = true) {
    in_place_ = on;
    return *this;
  }
  void register_state(ParamStore& store, const std::string& prefix) override {
    prefix_ = prefix;
    layer.register_state(store, prefix);
  }
  void for_each_layer(const std::function<void(Layer&, const std::string&)>& fn) override {
    fn(layer, prefix_);
  }
  void set_training(bool training) override { layer.set_training(training); }
  // The output goes to block_scratch slot `slot` instead of a buffer of its own; -1 (the
  // default) keeps its own. The caller guarantees that the output's readers, backward's
  // included, are done before the slot's next writer runs: inference plans, and a
  // training plan's output that no backward reads. Set before plan().
  Leaf& output_to_scratch(int slot) {
    scratch_slot_ = slot;
    return *this;
  }
  Shape plan(const Shape& in, const ExecConfig& cfg) override {
    layer.plan(in, cfg);
    const Shape out = layer.output_shape(in);
    const bool inference = cfg.inference;
    bool may_alias = false;
    if constexpr (requires { L::kForwardMayAlias; }) may_alias = L::kForwardMayAlias;
    aliased_ = in_place_ || (inference && may_alias);
    slot_ = aliased_ ? -1 : scratch_slot_;
    buffer_ = Tensor();
    planned_batch_ = out[0];
    if (slot_ >= 0) block_scratch::reserve(slot_, out.numel());
    else if (!aliased_)
      buffer_ = cfg.activation(out);
    return out;
  }
  const Tensor& forward(const Tensor& in) override { return forward_with(in); }
  // forward with extra inputs passed on to the layer (BatchNorm2d's fused residual add).
  template <class... Extra>
  const Tensor& forward_with(const Tensor& in, const Extra&... extra) {
    return forward_by(in, layer.kind(), [&](Tensor& out) { layer.forward(out, in, extra...); });
  }
  // forward computed by compute(out) instead of the layer, into this leaf's planned output
  // (shaped as the layer's for `in`), timed under this leaf's name as `kind`: a module that runs
  // this layer folded with the next ones (layers/fold.h).
  template <class F>
  const Tensor& forward_by(const Tensor& in, const char* kind, F&& compute) {
    in_ = in;
    if (aliased_) {
      out_ = in;
    } else {
      MPICNN_CHECK(planned_batch_ > 0, layer.kind(), " '", prefix_, "': forward before plan()");
      const Shape want = layer.output_shape(in.shape());
      MPICNN_CHECK(want[0] <= planned_batch_, layer.kind(), " '", prefix_, "': batch ", want[0],
                   " exceeds the planned ", planned_batch_);
      out_ = slot_ >= 0 ? block_scratch::view(slot_, want) : buffer_.slice0(0, want[0]);
    }
    profile::Scope timed(prefix_, kind);
    compute(out_);
    return out_;
  }
  void backward(Tensor& din, const Tensor& dout) override {
    profile::Scope timed(prefix_, layer.kind(), /*backward=*/true);
    layer.backward(din, dout, in_, out_);
  }
  // The last forward's output, writable: blocks add a residual into it in place.
  Tensor& output() { return out_; }
  bool is_in_place() const { return in_place_; }

  L layer;

 private:
  bool in_place_ = false;
  int scratch_slot_ = -1;
  // As planned: output is the input (in_place_, or an aliasing layer in an inference plan);
  // the block_scratch slot of the output, or -1 for buffer_.
  bool aliased_ = false;
  int slot_ = -1;
  int64_t planned_batch_ = 0;
  std::string prefix_;
  Tensor buffer_, in_, out_;
};

// Plans `bn`, whose input is a convolution's output that nothing else reads, to keep that
// input in bf16 and run in place over it where cfg.bf16_batchnorm_input() says so (--precision
// bf16 training on the CPU: one float32 buffer for the convolution and its BatchNorm, and a
// bf16 copy, where there were two float32 ones), else as a plain BatchNorm. Before bn's plan().
void plan_after_conv(Leaf<BatchNorm2d>& bn, const ExecConfig& cfg);
// Whether a plan uses the memory that bf16 BatchNorm inputs free: plan_after_conv's BatchNorms
// in place, and buffers that then no backward reads shared (ResidualBlock's downsample output):
// cfg.bf16_batchnorm_input() and cfg.bf16_batchnorm_sharing (off only in tests that show that
// sharing changes no value).
inline bool bf16_batchnorm_sharing(const ExecConfig& cfg) {
  return cfg.bf16_batchnorm_input() && cfg.bf16_batchnorm_sharing;
}

// Children run in order; gradients between them ping-pong through two buffers sized for the
// largest intermediate activation, so backward needs two buffers, not one per child. On the
// CPU those are block_scratch slots of the Sequential's nesting depth, shared with every other
// Sequential as deep (they run backward one after another); on the GPU its own.
class Sequential : public Module {
 public:
  Sequential();
  ~Sequential() override;
  // Appends a child named by its index (the torchvision name), returns it.
  template <class M>
  M& add(std::unique_ptr<M> child) {
    M& ref = *child;
    children_.emplace_back(std::to_string(children_.size()), std::move(child));
    return ref;
  }
  // Appends a child with an explicit name (ResNet's "conv1", DenseNet's "denseblock1").
  template <class M>
  M& add(const std::string& name, std::unique_ptr<M> child) {
    MPICNN_CHECK(!name.empty(), "Sequential::add: empty name (add_inline registers without one)");
    M& ref = *child;
    children_.emplace_back(name, std::move(child));
    return ref;
  }
  // Appends a child registered under this Sequential's own prefix, adding no name level
  // (torchvision's Inception blocks name their branches' layers flat: "branch5x5_1.conv").
  template <class M>
  M& add_inline(std::unique_ptr<M> child) {
    M& ref = *child;
    children_.emplace_back(std::string(), std::move(child));
    return ref;
  }
  size_t size() const { return children_.size(); }

  void register_state(ParamStore& store, const std::string& prefix) override;
  void for_each_layer(const std::function<void(Layer&, const std::string&)>& fn) override;
  void set_training(bool training) override;
  Shape plan(const Shape& in, const ExecConfig& cfg) override;
  const Tensor& forward(const Tensor& in) override;
  void backward(Tensor& din, const Tensor& dout) override;
  // For a caller whose output gradient is dead after this backward (a ResNet block's
  // downsample, which reads it last): set before plan, then call backward_over, which may
  // overwrite dout. A last child that is a BatchNorm2d (whose backward may run in place) then
  // writes its input gradient over dout instead of a buffer of its own.
  void set_overwrites_dout(bool on) { overwrites_dout_ = on; }
  void backward_over(Tensor& din, Tensor& dout);

 private:
  void backward_impl(Tensor& din, const Tensor& dout, Tensor* over);  // over: dout, writable
  bool overwrites_dout_ = false;
  bool last_over_dout_ = false;  // as planned: the last child's backward runs over dout
  size_t first_trainable();  // index of the lowest child with a trainable layer, or size()
  std::vector<std::pair<std::string, std::unique_ptr<Module>>> children_;
  // ready_from_[i]: lowest grad-slab offset of the parameters of children i.., -1 when they
  // have none; reported to the gradient-ready hook once child i's backward is done.
  std::vector<int64_t> ready_from_;
  std::vector<Shape> in_shapes_;  // planned input shape of each child
  // fused_[i]: child i is an in-place ReLU that the BatchNorm before it applies (fusion,
  // ExecConfig::fusion): forward and backward pass over it.
  std::vector<bool> fused_;
  // Folded inference (layers/fold.h; GPU, eval mode, ExecConfig::fold): folds_[i] is
  // set where child i is a Conv2d and child i + 1 its BatchNorm2d (and child i + 2 a ReLU: the
  // fold applies it), and forward runs those children as the one folded call.
  struct Fold;
  std::vector<std::unique_ptr<Fold>> folds_;
  bool training_ = true;
  bool folded_ran_ = false;  // the last forward ran folds (no backward then)
  const Tensor& forward_folded(size_t i, const Tensor& in);  // folds_[i] on in
  // The two gradient buffers, each as large as the largest intermediate gradient it holds.
  block_scratch::Buffer grads_[2];
  int64_t planned_batch_ = 0;
  int64_t batch_ = 0;             // batch of the last forward
};

// Convenience for building: std::make_unique of a Leaf.
template <class L, class... Args>
std::unique_ptr<Leaf<L>> leaf(Args&&... args) {
  return std::make_unique<Leaf<L>>(std::forward<Args>(args)...);
}

}  // namespace mpicnn
