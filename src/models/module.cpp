// Sequential: planning, forward chaining and ping-pong gradient buffers.
#include "models/module.h"

#include <algorithm>

namespace mpicnn {

void Sequential::register_state(ParamStore& store, const std::string& prefix) {
  for (auto& [name, child] : children_) child->register_state(store, prefix + name + ".");
}

void Sequential::for_each_layer(const std::function<void(Layer&, const std::string&)>& fn) {
  for (auto& [name, child] : children_) child->for_each_layer(fn);
}

void Sequential::set_training(bool training) {
  for (auto& [name, child] : children_) child->set_training(training);
}

Shape Sequential::plan(const Shape& in) {
  CHECK(!children_.empty(), "Sequential: no children to plan");
  in_shapes_.clear();
  Shape s = in;
  int64_t largest = 0;
  for (size_t i = 0; i < children_.size(); ++i) {
    in_shapes_.push_back(s);
    if (i > 0) largest = std::max(largest, s.numel());  // gradient of an intermediate
    s = children_[i].second->plan(s);
  }
  ping_ = largest ? Tensor::empty({largest}) : Tensor();
  pong_ = largest ? Tensor::empty({largest}) : Tensor();
  planned_batch_ = in[0];
  return s;
}

const Tensor& Sequential::forward(const Tensor& in) {
  CHECK(!in_shapes_.empty(), "Sequential: forward before plan()");
  CHECK(in.dim() >= 1 && in.size(0) <= planned_batch_, "Sequential: batch ", in.size(0),
        " exceeds the planned ", planned_batch_);
  batch_ = in.size(0);
  const Tensor* x = &in;
  for (auto& [name, child] : children_) x = &child->forward(*x);
  return *x;
}

void Sequential::backward(Tensor& din, const Tensor& dout) {
  const Tensor* g = &dout;
  Tensor views[2];
  for (size_t i = children_.size(); i-- > 0;) {
    if (i == 0) {
      children_[0].second->backward(din, *g);
      break;
    }
    // Gradient w.r.t. child i's input, in whichever buffer g is not using.
    Shape s = in_shapes_[i];
    s.d[0] = batch_;
    Tensor& buf = (i % 2) ? ping_ : pong_;
    Tensor& v = views[i % 2];
    v = Tensor::view(buf.data(), s);
    children_[i].second->backward(v, *g);
    g = &v;
  }
}

}  // namespace mpicnn
