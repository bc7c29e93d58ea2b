// Softmax cross-entropy on logits, as torch.nn.CrossEntropyLoss(reduction='mean',
// label_smoothing=eps): loss_n = (1-eps) * -log p[n, y_n] + eps/C * sum_c -log p[n, c], averaged
// over the batch. Not a general NLL with class weights or ignore_index.
#pragma once
#include <cstdint>

#include "layers/layer.h"

namespace mpicnn {

class SoftmaxCrossEntropy : public Layer {
 public:
  explicit SoftmaxCrossEntropy(float label_smoothing = 0.f);
  const char* kind() const override { return "SoftmaxCrossEntropy"; }
  // Sizes the probability workspace for up to `max_batch` rows of `classes` logits, on the
  // device the logits will be on.
  void plan(int64_t max_batch, int64_t classes, Device device = Device::CPU);
  // Mean loss over the batch. logits (N, C), targets[N] in [0, C) (host memory; on the GPU
  // they are copied to the device for this call and the next backward). Keeps softmax.
  double forward(const Tensor& logits, const int32_t* targets);
  // dlogits (N, C) = scale * (softmax - smoothed one-hot) / N  ('='). `scale` is d(total)/d(loss).
  // targets: the same labels as the last forward.
  void backward(Tensor& dlogits, const int32_t* targets, float scale = 1.f) const;
  // Row-wise probabilities of the last forward, (N, C), on the logits' device.
  const Tensor& probabilities() const { return probs_view_; }
  float label_smoothing() const { return eps_; }

 private:
  float eps_;
  Tensor probs_;       // (max_batch, C) workspace
  Tensor probs_view_;  // (N, C) rows of the last forward
  std::shared_ptr<void> targets_dev_;  // (max_batch) int32 on the GPU, when planned there
};

}  // namespace mpicnn
