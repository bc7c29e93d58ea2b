// RPN head: conv3x3 -> ReLU -> {cls_logits, bbox_pred} on every FPN level with one set of
// parameters. Backward: dt = cls'(dobj) + bbox'(ddeltas), masked by the ReLU, then conv'.
#include "detect/rpn_head.h"

#include "core/check.h"
#include "layers/add.h"
#include "models/init.h"

namespace mpicnn::detect {

RpnHead::RpnHead(int in_channels, int num_anchors, int levels) {
  CHECK(levels >= 1 && num_anchors >= 1 && in_channels >= 1, "RpnHead: bad sizes");
  for (int l = 0; l < levels; ++l) {
    Level v;
    v.conv = leaf<Conv2d>(Conv2dOptions{.in_channels = in_channels, .out_channels = in_channels,
                                        .kernel = 3, .padding = 1});
    v.relu = leaf<ReLU>();
    v.cls = leaf<Conv2d>(Conv2dOptions{.in_channels = in_channels, .out_channels = num_anchors});
    v.bbox = leaf<Conv2d>(
        Conv2dOptions{.in_channels = in_channels, .out_channels = 4 * num_anchors});
    levels_.push_back(std::move(v));
  }
}

void RpnHead::register_state(ParamStore& store, const std::string& prefix) {
  prefix_ = prefix;
  Level& v = levels_[0];
  v.conv->register_state(store, prefix + "conv.0.0.");
  v.cls->register_state(store, prefix + "cls_logits.");
  v.bbox->register_state(store, prefix + "bbox_pred.");
}

void RpnHead::share_parameters() {
  auto share = [](Conv2d& dst, const Conv2d& src) {
    CHECK(src.weight.device() == Device::CPU, "RpnHead: shared parameters are CPU only");
    dst.weight = src.weight;
    dst.grad_weight = src.grad_weight;
    dst.bias = src.bias;
    dst.grad_bias = src.grad_bias;
  };
  for (size_t l = 1; l < levels_.size(); ++l) {
    share(levels_[l].conv->layer, levels_[0].conv->layer);
    share(levels_[l].cls->layer, levels_[0].cls->layer);
    share(levels_[l].bbox->layer, levels_[0].bbox->layer);
  }
}

void RpnHead::init(uint64_t seed) {
  for_each_layer([seed](Layer& l, const std::string& name) {
    auto& c = dynamic_cast<Conv2d&>(l);
    init::normal(c.weight, seed, name + "weight", 0, real(0.01));
    init::constant(c.bias, 0);
  });
}

void RpnHead::for_each_layer(const std::function<void(Layer&, const std::string&)>& fn) {
  levels_[0].conv->for_each_layer(fn);
  levels_[0].cls->for_each_layer(fn);
  levels_[0].bbox->for_each_layer(fn);
}

void RpnHead::set_training(bool training) {
  for (Level& v : levels_) {
    v.conv->set_training(training);
    v.cls->set_training(training);
    v.bbox->set_training(training);
    // The shared layers follow level 0's frozen flag (set by the model's freeze).
    v.conv->layer.set_param_state(true, levels_[0].conv->layer.frozen());
    v.cls->layer.set_param_state(true, levels_[0].cls->layer.frozen());
    v.bbox->layer.set_param_state(true, levels_[0].bbox->layer.frozen());
  }
}

void RpnHead::plan(const std::vector<Shape>& shapes, const ExecConfig& cfg) {
  CHECK(shapes.size() == levels_.size(), "RpnHead: ", shapes.size(), " levels planned, built for ",
        levels_.size());
  for (size_t l = 0; l < levels_.size(); ++l) {
    Level& v = levels_[l];
    const Shape t = v.conv->plan(shapes[l], cfg);
    v.relu->plan(t, cfg);
    v.cls->plan(t, cfg);
    v.bbox->plan(t, cfg);
    v.dt = Tensor::empty(t);
    v.dt2 = Tensor::empty(t);
  }
}

void RpnHead::forward(const std::vector<Tensor>& features) {
  CHECK(features.size() == levels_.size(), "RpnHead: ", features.size(), " levels, expected ",
        levels_.size());
  objectness_.clear();
  deltas_.clear();
  for (size_t l = 0; l < levels_.size(); ++l) {
    Level& v = levels_[l];
    const Tensor& t = v.relu->forward(v.conv->forward(features[l]));
    objectness_.push_back(v.cls->forward(t));
    deltas_.push_back(v.bbox->forward(t));
  }
}

void RpnHead::backward(std::vector<Tensor>& dfeatures, const std::vector<Tensor>& dobjectness,
                       const std::vector<Tensor>& ddeltas) {
  CHECK(dfeatures.size() == levels_.size() && dobjectness.size() == levels_.size() &&
            ddeltas.size() == levels_.size(),
        "RpnHead::backward: one gradient per level expected");
  for (size_t l = 0; l < levels_.size(); ++l) {
    Level& v = levels_[l];
    const int64_t n = dobjectness[l].size(0);
    Tensor dt = v.dt.slice0(0, n), dt2 = v.dt2.slice0(0, n);
    v.cls->backward(dt, dobjectness[l]);
    v.bbox->backward(dt2, ddeltas[l]);
    accumulate(dt, dt2);
    v.relu->backward(dt, dt);
    v.conv->backward(dfeatures[l], dt);
  }
}

}  // namespace mpicnn::detect
