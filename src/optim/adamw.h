// AdamW (decoupled weight decay), exactly as torch.optim.AdamW (1.13, single-tensor path):
// the same float32 operations in the same order, optional AMSGrad. Optional recipe: no
// weight decay on BatchNorm parameters and biases.
// Not Adam with L2 decay (weight decay here never enters the moments), not maximize.
#pragma once
#include "optim/optimizer.h"

namespace mpicnn {

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
  bool amsgrad = false;
  // No weight decay on entries whose `decay` flag is false (BatchNorm parameters, biases).
  bool exclude_bn_bias = false;
};

class AdamW final : public Optimizer {
 public:
  // `store` must be allocated and must outlive the optimizer. Rejects what torch rejects:
  // negative lr, eps or weight decay, betas outside [0, 1).
  AdamW(ParamStore& store, const AdamWOptions& options);

  // t += 1; p *= 1 - lr*wd; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g*g (AMSGrad: vmax =
  // max(vmax, v), used instead of v); p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps).
  void step() override;
  const char* name() const override { return "adamw"; }
  const AdamWOptions& config() const { return opt_; }
  // (param slab floats) each, same layout as store.values(); max_exp_avg_sq only with AMSGrad.
  const Tensor& exp_avg() const { return m_; }
  const Tensor& exp_avg_sq() const { return v_; }
  const Tensor& max_exp_avg_sq() const { return vmax_; }

 private:
  void step_group(const ChunkGroup& group);  // one group's chunks at its learning rate
  std::vector<std::pair<std::string, double>> options() const override;
  AdamWOptions opt_;
  Tensor m_, v_, vmax_;
};

}  // namespace mpicnn
