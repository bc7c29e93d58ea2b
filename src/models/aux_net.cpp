// AuxNet: segments and heads in registration order forward, in reverse order backward.
#include "models/aux_net.h"

#include "layers/add.h"

namespace mpicnn {

namespace {

Tensor batch_view(Tensor& buf, Shape s, int64_t n) {
  s.d[0] = n;
  return buf.head(s);
}

}  // namespace

void AuxNet::add_segment(std::unique_ptr<Sequential> segment) {
  parts_.push_back({false, segments_.size()});
  segments_.push_back(std::move(segment));
}

void AuxNet::add_head(const std::string& name, real weight, size_t tap,
                      std::unique_ptr<Module> head) {
  CHECK(tap < segments_.size(), "AuxNet: head ", name, " reads segment ", tap,
        ", which is not added yet");
  parts_.push_back({true, heads_.size()});
  heads_.push_back({{name, weight}, tap, std::move(head), {}, {}, nullptr});
}

const Tensor& AuxNet::head_logits(size_t i) const {
  CHECK(heads_ran_, "AuxNet: head logits of a forward that did not run the heads (eval mode)");
  return *heads_.at(i).out;
}

void AuxNet::register_state(ParamStore& store, const std::string& prefix) {
  for (const Part& p : parts_) {
    if (p.head)
      heads_[p.index].module->register_state(store, prefix + heads_[p.index].info.name + ".");
    else
      segments_[p.index]->register_state(store, prefix);
  }
}

void AuxNet::for_each_layer(const std::function<void(Layer&, const std::string&)>& fn) {
  for (const Part& p : parts_) {
    if (p.head)
      heads_[p.index].module->for_each_layer(fn);
    else
      segments_[p.index]->for_each_layer(fn);
  }
}

void AuxNet::set_training(bool training) {
  training_ = training;
  for (auto& s : segments_) s->set_training(training);
  for (HeadPart& h : heads_) h.module->set_training(training);
}

Shape AuxNet::plan(const Shape& in, const ExecConfig& cfg) {
  CHECK(!segments_.empty(), "AuxNet: no segment to plan");
  seg_shapes_.clear();
  g_seg_.clear();
  Shape s = in;
  for (size_t i = 0; i < segments_.size(); ++i) {
    s = segments_[i]->plan(s, cfg);
    seg_shapes_.push_back(s);
    if (i + 1 < segments_.size()) g_seg_.push_back(cfg.activation(s));
  }
  for (HeadPart& h : heads_) {
    CHECK(h.tap + 1 < segments_.size(), "AuxNet: head ", h.info.name,
          " reads the last segment (the main logits)");
    h.in_shape = seg_shapes_[h.tap];
    const Shape out = h.module->plan(h.in_shape, cfg);
    CHECK(out == s, "AuxNet: head ", h.info.name, " gives ", out.str(), ", the trunk ", s.str());
    h.g_in = cfg.activation(h.in_shape);
  }
  seg_out_.assign(segments_.size(), nullptr);
  return s;
}

const Tensor& AuxNet::forward(const Tensor& in) {
  CHECK(!seg_out_.empty(), "AuxNet: forward before plan()");
  batch_ = in.size(0);
  heads_ran_ = false;  // until they have
  const Tensor* x = &in;
  for (const Part& p : parts_) {
    if (!p.head) {
      x = &segments_[p.index]->forward(*x);
      seg_out_[p.index] = x;
    } else if (training_) {
      HeadPart& h = heads_[p.index];
      h.out = &h.module->forward(*seg_out_[h.tap]);
    }
  }
  heads_ran_ = training_;
  return *x;
}

// Segment i's backward from `dout` (its output gradient), into din (i == 0) or the previous
// segment's output gradient; with `grad_in` false (nothing below needs that gradient) it gets
// an undefined one, so its Sequential stops at its lowest trainable layer, and a segment with
// none is skipped.
void AuxNet::segment_backward(size_t i, Tensor& din, const Tensor& dout, bool grad_in) {
  if (i == 0) return segments_[0]->backward(din, dout);
  Tensor none;
  if (!grad_in && !segments_[i]->has_trainable_layer()) return;
  Tensor g = grad_in ? batch_view(g_seg_[i - 1], seg_shapes_[i - 1], batch_) : none;
  segments_[i]->backward(g, dout);
}

void AuxNet::backward(Tensor& din, const Tensor& dout, std::span<const Tensor* const> dheads) {
  CHECK(dheads.size() == (heads_ran_ ? heads_.size() : 0), "AuxNet backward: ", dheads.size(),
        " head gradients for a forward that ran ", heads_ran_ ? heads_.size() : 0, " heads");
  // grad_in[i]: segment i's input gradient is needed: din is wanted, or a segment before i
  // trains (fine-tuning with a frozen trunk needs none below its lowest trainable layer).
  std::vector<bool> grad_in(segments_.size());
  bool below = din.defined();
  for (size_t i = 0; i < segments_.size(); ++i) {
    grad_in[i] = below;
    below = below || segments_[i]->has_trainable_layer();
  }
  const size_t last = segments_.size() - 1;
  for (size_t k = parts_.size(); k-- > 0;) {
    const Part& p = parts_[k];
    if (p.head) {
      if (!heads_ran_) continue;
      HeadPart& h = heads_[p.index];
      CHECK(dheads[p.index] && dheads[p.index]->shape() == h.out->shape(), "AuxNet backward: ",
            "head ", h.info.name, " gradient does not match its logits ", h.out->shape().str());
      // The head's input gradient joins segment tap's output gradient: needed when that is.
      const bool wanted = grad_in[h.tap + 1];
      if (!wanted && !h.module->has_trainable_layer()) continue;
      Tensor none;
      Tensor g = wanted ? batch_view(h.g_in, h.in_shape, batch_) : none;
      h.module->backward(g, *dheads[p.index]);
      continue;
    }
    const size_t i = p.index;
    if (i == last) {
      segment_backward(i, din, dout, grad_in[i]);
      continue;
    }
    if (!grad_in[i + 1]) continue;  // nothing at or below segment i trains, nor is din wanted
    // Written ('=') by segment i + 1's backward, which ran before this one.
    Tensor g = batch_view(g_seg_[i], seg_shapes_[i], batch_);
    if (heads_ran_)
      for (HeadPart& h : heads_)
        if (h.tap == i) accumulate(g, batch_view(h.g_in, h.in_shape, batch_));
    segment_backward(i, din, g, grad_in[i]);
  }
}

void AuxNet::backward(Tensor& din, const Tensor& dout) { backward(din, dout, {}); }

}  // namespace mpicnn
