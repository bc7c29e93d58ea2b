// AuxLosses: one SoftmaxCrossEntropy per auxiliary head, planned once, scaled by its weight.
#include "models/aux_loss.h"

namespace mpicnn {

void AuxLosses::plan(const Model& model, int64_t max_batch, real label_smoothing,
                     Device device) {
  const std::vector<AuxOutput>& heads = model.aux_heads();
  heads_.clear();
  grads_.clear();
  const int64_t classes = model.options().num_classes;
  for (const AuxOutput& h : heads) {
    Head& mine = heads_.emplace_back(
        Head{h.weight, std::make_unique<SoftmaxCrossEntropy>(label_smoothing),
             Tensor::zeros(Shape{max_batch, classes}, device), {}});
    mine.xent->plan(max_batch, classes, device);
  }
  for (Head& h : heads_) grads_.push_back(&h.view);
  active_ = 0;
}

void AuxLosses::forward(const Model& model, const int32_t* targets) {
  const std::vector<AuxOutput>& outs = model.aux_outputs();
  CHECK(outs.size() <= heads_.size(), "AuxLosses: ", outs.size(), " auxiliary outputs, planned ",
        heads_.size());
  active_ = outs.size();
  for (size_t i = 0; i < active_; ++i) {
    CHECK(outs[i].weight == heads_[i].weight, "AuxLosses: planned for another model");
    heads_[i].xent->forward(*outs[i].logits, targets);
    rows_ = outs[i].logits->size(0);
  }
}

std::span<const Tensor* const> AuxLosses::backward(const int32_t* targets, real scale) {
  for (size_t i = 0; i < active_; ++i) {
    Head& h = heads_[i];
    h.view = h.dlogits.slice0(0, rows_);
    h.xent->backward(h.view, targets, scale * h.weight);
  }
  return std::span<const Tensor* const>(grads_.data(), active_);
}

double AuxLosses::weighted_loss() {
  double total = 0;
  for (size_t i = 0; i < active_; ++i) total += double(heads_[i].weight) * heads_[i].xent->loss();
  return total;
}

}  // namespace mpicnn
