// AuxLosses: softmax cross-entropy on each auxiliary head of a model in training mode, weighted
// as torchvision's reference recipe (references/classification/train.py): the training loss is
// main + sum weight_i * cross_entropy(aux_i), 0.4 for Inception v3's head, 0.3 for each of
// GoogLeNet's. The main loss stays the caller's; this is the heads' share, for the trainer and
// the parity tests alike. Nothing for models without heads or after an eval-mode forward.
#pragma once
#include <memory>
#include <span>
#include <vector>

#include "layers/softmax_xent.h"
#include "models/model.h"

namespace mpicnn {

class AuxLosses {
 public:
  // One loss and one gradient buffer (max_batch, classes) per head of `model`, on `device`,
  // with the main loss's label smoothing.
  void plan(const Model& model, int64_t max_batch, real label_smoothing, Device device);
  // After model.forward: each computed head's loss for targets[N] (host memory).
  void forward(const Model& model, const int32_t* targets);
  // dlogits of head i = scale * weight_i * d cross_entropy_i / d logits ('='), for the same
  // targets; returns them in aux_outputs() order, for Model::backward.
  std::span<const Tensor* const> backward(const int32_t* targets, real scale);
  // sum weight_i * loss_i over the heads of the last forward; 0 when it computed none.
  double weighted_loss();

 private:
  struct Head {
    real weight;
    std::unique_ptr<SoftmaxCrossEntropy> xent;
    Tensor dlogits;  // (max_batch, classes)
    Tensor view;     // the last backward's (N, classes) rows
  };
  std::vector<Head> heads_;
  std::vector<const Tensor*> grads_;  // &heads_[i].view
  size_t active_ = 0;  // heads computed by the last forward
  int64_t rows_ = 0;   // its batch
};

}  // namespace mpicnn
