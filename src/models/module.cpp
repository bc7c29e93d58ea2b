// Sequential: planning, forward chaining and ping-pong gradient buffers.
#include "models/module.h"

#include <algorithm>

#include "layers/batchnorm.h"
#include "layers/conv2d.h"
#include "layers/fold.h"
#include "layers/relu.h"

namespace mpicnn {

namespace detail {
thread_local const GradReadyFn* grad_ready_hook = nullptr;
}

namespace block_scratch {
namespace {
thread_local std::vector<Tensor> t_slots;
}
void reserve(int slot, int64_t floats) {
  if (t_slots.size() <= size_t(slot)) t_slots.resize(size_t(slot) + 1);
  Tensor& t = t_slots[size_t(slot)];
  if (!t.defined() || t.numel() < floats)
    t = Tensor::empty({std::max<int64_t>(floats, 1)}, Device::CPU);
}
Tensor view(int slot, const Shape& shape) {
  MPICNN_CHECK(size_t(slot) < t_slots.size() && t_slots[size_t(slot)].numel() >= shape.numel(),
               "block scratch slot ", slot, ": ", shape.str(), " not reserved on this thread");
  return t_slots[size_t(slot)].head(shape);
}
int64_t floats_for(const Shape& shape, const ExecConfig& cfg) {
  const int64_t bytes = shape.numel() * int64_t(elem_bytes(cfg.format_for(shape).elem));
  return (bytes + int64_t(sizeof(real)) - 1) / int64_t(sizeof(real));
}
void Buffer::plan(int slot, int64_t floats, const ExecConfig& cfg) {
  slot_ = -1;
  own_ = Tensor();
  format_ = cfg.activations;
  if (floats == 0 || cfg.inference) return;  // no backward through it
  if (cfg.device == Device::CPU) {
    slot_ = slot;
    reserve(slot, floats);
  } else {
    own_ = Tensor::empty({floats}, cfg.device);
  }
}
Tensor Buffer::view(const Shape& shape) const {
  if (slot_ >= 0) return block_scratch::view(slot_, shape);
  const Format f = shape.ndim == 4 ? format_ : Format{};
  return f.plain() ? own_.head(shape) : own_.reinterpret(shape, f);
}
}  // namespace block_scratch

namespace {
// Sequential::plan calls open on this thread: a Sequential's nesting depth while it plans.
thread_local int t_sequential_depth = 0;
}  // namespace

void plan_after_conv(Leaf<BatchNorm2d>& bn, const ExecConfig& cfg) {
  bn.layer.set_bf16_input(cfg.bf16_batchnorm_input());
  bn.in_place(bf16_batchnorm_sharing(cfg));
}

struct Sequential::Fold {
  FoldedConv conv;
  bool relu = false;  // child i + 2 is a ReLU, applied by the fused call
};

Sequential::Sequential() = default;
Sequential::~Sequential() = default;

void Sequential::register_state(ParamStore& store, const std::string& prefix) {
  // Offsets are assigned at declaration, so each child's first parameter offset is known here.
  std::vector<int64_t> first(children_.size(), -1);
  for (size_t i = 0; i < children_.size(); ++i) {
    const size_t before = store.entries().size();
    const std::string& name = children_[i].first;
    children_[i].second->register_state(store, name.empty() ? prefix : prefix + name + ".");
    for (size_t e = before; e < store.entries().size(); ++e)
      if (store.entries()[e].kind == StateKind::Param) {
        first[i] = store.entries()[e].offset;
        break;
      }
  }
  ready_from_.assign(children_.size(), -1);
  int64_t lowest = -1;
  for (size_t i = children_.size(); i-- > 0;) {
    if (first[i] >= 0) lowest = first[i];  // registration order: earlier children sit lower
    ready_from_[i] = lowest;
  }
}

void Sequential::for_each_layer(const std::function<void(Layer&, const std::string&)>& fn) {
  for (auto& [name, child] : children_) child->for_each_layer(fn);
}

void Sequential::set_training(bool training) {
  for (auto& [name, child] : children_) child->set_training(training);
  training_ = training;
  if (!training)
    for (auto& f : folds_)
      if (f) f->conv.refresh();  // the folded copies follow the weights as they are now
}

Shape Sequential::plan(const Shape& in, const ExecConfig& cfg) {
  CHECK(!children_.empty(), "Sequential: no children to plan");
  const int depth = t_sequential_depth;
  struct Nest {  // children plan one level deeper, until this plan returns (or throws)
    Nest() { ++t_sequential_depth; }
    ~Nest() { --t_sequential_depth; }
  } nest;
  in_shapes_.clear();
  Shape s = in;
  for (size_t i = 0; i < children_.size(); ++i) {
    in_shapes_.push_back(s);
    // A BatchNorm2d right after a Conv2d: child i + 1 alone reads child i's output.
    auto* bn = dynamic_cast<Leaf<BatchNorm2d>*>(children_[i].second.get());
    if (bn && i > 0 && dynamic_cast<Leaf<Conv2d>*>(children_[i - 1].second.get()))
      plan_after_conv(*bn, cfg);
    s = children_[i].second->plan(s, cfg);
  }
  // Fusion: an in-place ReLU right after a BatchNorm is applied by the BatchNorm.
  const bool fuse = cfg.fusion;
  fused_.assign(children_.size(), false);
  for (size_t i = 0; i < children_.size(); ++i) {
    auto* bn = dynamic_cast<Leaf<BatchNorm2d>*>(children_[i].second.get());
    if (!bn) continue;
    auto* relu = i + 1 < children_.size()
                     ? dynamic_cast<Leaf<ReLU>*>(children_[i + 1].second.get()) : nullptr;
    const bool fused = fuse && relu && relu->is_in_place();
    bn->layer.set_fused_relu(fused);
    if (fused) fused_[i + 1] = true;
  }
  // Folded inference: a Conv2d, the BatchNorm2d after it (and a ReLU after that).
  folds_.clear();
  folds_.resize(children_.size());
  for (size_t i = 0; cfg.folds() && i + 1 < children_.size(); ++i) {
    auto* conv = dynamic_cast<Leaf<Conv2d>*>(children_[i].second.get());
    auto* bn = dynamic_cast<Leaf<BatchNorm2d>*>(children_[i + 1].second.get());
    if (!conv || !bn) continue;
    auto& f = folds_[i] = std::make_unique<Fold>();
    f->relu = i + 2 < children_.size() &&
              dynamic_cast<Leaf<ReLU>*>(children_[i + 2].second.get()) != nullptr;
    f->conv.plan(conv->layer, bn->layer);
    if (!training_) f->conv.refresh();
  }
  // Gradient buffers: child i's input gradient goes to buffer i % 2 (backward), sized for the
  // largest it holds; fused ReLUs pass theirs through, and child 0's is the caller's din.
  const size_t last = children_.size() - 1;
  last_over_dout_ = overwrites_dout_ && last > 0 &&
                    dynamic_cast<Leaf<BatchNorm2d>*>(children_[last].second.get()) != nullptr;
  int64_t need[2] = {0, 0};
  for (size_t i = 1; i < children_.size(); ++i)
    if (!fused_[i] && !(i == last && last_over_dout_))
      need[i % 2] = std::max(need[i % 2], block_scratch::floats_for(in_shapes_[i], cfg));
  for (int k = 0; k < 2; ++k)
    grads_[k].plan(block_scratch::kSequential0 + 2 * depth + k, need[k], cfg);
  planned_batch_ = in[0];
  return s;
}

const Tensor& Sequential::forward(const Tensor& in) {
  CHECK(!in_shapes_.empty(), "Sequential: forward before plan()");
  CHECK(in.dim() >= 1 && in.size(0) <= planned_batch_, "Sequential: batch ", in.size(0),
        " exceeds the planned ", planned_batch_);
  batch_ = in.size(0);
  folded_ran_ = false;
  const Tensor* x = &in;
  for (size_t i = 0; i < children_.size(); ++i) {
    if (!training_ && folds_[i]) {
      x = &forward_folded(i, *x);
      i += folds_[i]->relu ? 2 : 1;  // the BatchNorm (and ReLU) ran in the folded call
    } else if (!fused_[i]) {
      x = &children_[i].second->forward(*x);
    }
  }
  return *x;
}

const Tensor& Sequential::forward_folded(size_t i, const Tensor& in) {
  folded_ran_ = true;
  Fold& f = *folds_[i];
  return static_cast<Leaf<Conv2d>&>(*children_[i].second)
      .forward_by(in, "FoldedConv", [&](Tensor& out) { f.conv.forward(out, in, nullptr, f.relu); });
}

bool Module::has_trainable_layer() {
  bool trains = false;
  for_each_layer([&](Layer& l, const std::string&) { trains = trains || l.trainable(); });
  return trains;
}

size_t Sequential::first_trainable() {
  for (size_t i = 0; i < children_.size(); ++i)
    if (children_[i].second->has_trainable_layer()) return i;
  return children_.size();
}

void Sequential::backward(Tensor& din, const Tensor& dout) {
  CHECK(!last_over_dout_, "Sequential: planned to overwrite its output gradient: backward_over");
  backward_impl(din, dout, nullptr);
}

void Sequential::backward_over(Tensor& din, Tensor& dout) { backward_impl(din, dout, &dout); }

void Sequential::backward_impl(Tensor& din, const Tensor& dout, Tensor* over) {
  CHECK(!folded_ran_, "Sequential: backward after a folded eval-mode forward (MPICNN_GPU_FOLD): "
        "its BatchNorm layers did not run");
  // Without a din to produce, the children below the lowest trainable one (all frozen, when
  // fine-tuning) need no gradient: backward stops at that child, which gets an undefined din.
  const size_t stop = din.defined() ? 0 : first_trainable();
  const Tensor* g = &dout;
  Tensor views[2];
  const GradReadyFn* hook = detail::grad_ready_hook;
  for (size_t i = children_.size(); i-- > stop;) {
    if (i == stop) {
      children_[i].second->backward(din, *g);  // undefined unless stop is 0
      break;
    }
    // A fused ReLU (never the first child, nor trainable: never `stop`): its gradient passes.
    if (fused_[i]) continue;
    // Gradient w.r.t. child i's input, in whichever buffer g is not using (or over dout).
    Shape s = in_shapes_[i];
    s.d[0] = batch_;
    Tensor& v = views[i % 2];
    v = i == children_.size() - 1 && last_over_dout_ ? *over : grads_[i % 2].view(s);
    children_[i].second->backward(v, *g);
    if (hook && ready_from_[i] >= 0) (*hook)(ready_from_[i]);
    g = &v;
  }
  // The skipped children's gradients are final as they are.
  if (hook && stop < children_.size() && ready_from_[0] >= 0) (*hook)(ready_from_[0]);
}

}  // namespace mpicnn
