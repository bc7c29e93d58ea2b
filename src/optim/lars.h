// LARS (You et al. 2017, "Large Batch Training of Convolutional Networks") as MLPerf's ResNet-50
// reference applies it: per parameter tensor a trust ratio eta * |w| / (|g| + wd * |w| + eps)
// (1 where |w| or |g| is 0) scales the learning rate, weight decay is added to the gradient,
// then heavy-ball momentum on the scaled step: buf = momentum * buf + lr * trust * (g + wd * w),
// w -= buf (Nesterov: w -= lr * trust * (g + wd * w) + momentum * buf). BatchNorm parameters and
// biases (entries whose `decay` flag is false) skip both: trust 1, no decay, as MLPerf's skip
// list. Not in torch: tests/python/optim_torch.py holds a reference written with torch ops.
// CPU only for now (a GPU store is refused at construction).
#pragma once
#include "optim/optimizer.h"

namespace mpicnn {

struct LarsOptions {
  double lr = 0.1;
  double momentum = 0.9;
  double weight_decay = 1e-4;
  double eta = 0.001;  // trust coefficient
  double eps = 0;      // MLPerf's reference: 0
  bool nesterov = false;
};

class LARS final : public Optimizer {
 public:
  // `store` must be allocated, on the CPU, and must outlive the optimizer. momentum in [0, 1),
  // weight decay >= 0, eta > 0, eps >= 0, all finite.
  LARS(ParamStore& store, const LarsOptions& options);

  void step() override;
  const char* name() const override { return "lars"; }
  const LarsOptions& config() const { return opt_; }
  const Tensor& momentum_buffer() const { return buf_; }

 private:
  std::vector<std::pair<std::string, double>> options() const override;
  LarsOptions opt_;
  Tensor buf_;
  struct Entry {
    int64_t begin, end;
    bool adapt;  // trust ratio and weight decay (false: BatchNorm parameters and biases)
    double lr_mult;
  };
  std::vector<Entry> entries_;  // the trainable parameters
};

}  // namespace mpicnn
