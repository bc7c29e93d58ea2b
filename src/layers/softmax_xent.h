// Softmax cross-entropy on logits, as torch.nn.CrossEntropyLoss(reduction='mean',
// label_smoothing=eps): loss_n = (1-eps) * -log p[n, y_n] + eps/C * sum_c -log p[n, c], averaged
// over the batch. Not a general NLL with class weights or ignore_index.
#pragma once
#include <cmath>
#include <cstdint>
#include <memory>

#include "core/gpu.h"
#include "layers/layer.h"

namespace mpicnn {

class SoftmaxCrossEntropy : public Layer {
 public:
  explicit SoftmaxCrossEntropy(real label_smoothing = 0.f);
  const char* kind() const override { return "SoftmaxCrossEntropy"; }
  // Sizes the probability workspace for up to `max_batch` rows of `classes` logits, on the
  // device the logits will be on.
  void plan(int64_t max_batch, int64_t classes, Device device = Device::CPU);
  // Softmax and the per-sample losses of logits (N, C), targets[N] in [0, C) (host memory; on
  // the GPU they are copied up for this call and the next backward). On the GPU this only
  // queues the work: loss() reads the result, so a training step can queue its backward first.
  void forward(const Tensor& logits, const int32_t* targets);
  // Mean loss over the last forward's batch (on the GPU, waits for it the first time).
  double loss();
  // dlogits (N, C) = scale * (softmax - smoothed one-hot) / N  ('='). `scale` is d(total)/d(loss).
  // targets: the same labels as the last forward.
  void backward(Tensor& dlogits, const int32_t* targets, real scale = 1.f) const;
  // Row-wise probabilities of the last forward, (N, C), on the logits' device.
  const Tensor& probabilities() const { return probs_view_; }
  real label_smoothing() const { return eps_; }

 private:
  real eps_;
  Tensor probs_;       // (max_batch, C) workspace
  Tensor probs_view_;  // (N, C) rows of the last forward
  int64_t rows_ = 0;       // N of the last forward
  double loss_ = NAN;      // its mean loss, once known
  bool loss_known_ = false;
  // On the GPU: targets and row losses, in device memory and in page-locked host staging,
  // and the point after the last forward's read-back copy.
  std::shared_ptr<void> targets_dev_, targets_host_, rows_dev_, rows_host_;
  std::shared_ptr<gpu::Event> copied_;
};

}  // namespace mpicnn
