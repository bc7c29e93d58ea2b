// SGD with momentum, dampening, Nesterov and weight decay, exactly as torch.optim.SGD (1.13,
// single-tensor path): the same operations in the same order on float32, so results match
// torch's. Optional recipe: no weight decay on BatchNorm parameters and biases.
// Not maximize and not sparse gradients.
#pragma once
#include "optim/optimizer.h"

namespace mpicnn {

struct SgdOptions {
  double lr = 0.1;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
  // No weight decay on entries whose `decay` flag is false (BatchNorm parameters, biases),
  // as torch param groups with weight_decay 0 for them.
  bool exclude_bn_bias = false;
};

class SGD final : public Optimizer {
 public:
  // `store` must be allocated and must outlive the optimizer. Rejects what torch rejects
  // (negative lr, momentum or weight decay; Nesterov without momentum or with dampening),
  // plus negative or non-finite dampening.
  SGD(ParamStore& store, const SgdOptions& options);

  // d = g + wd*p; with momentum: buf = d on the first step, later buf = momentum*buf +
  // (1-dampening)*d, then d = d + momentum*buf (Nesterov) or d = buf; p -= lr*d.
  void step() override;
  const char* name() const override { return "sgd"; }
  const SgdOptions& config() const { return opt_; }
  // (param slab floats), same layout as store.values(); undefined when momentum is 0.
  const Tensor& momentum_buffer() const { return buf_; }

 private:
  void step_group(const ChunkGroup& group);  // one group's chunks at its learning rate
  std::vector<std::pair<std::string, double>> options() const override;
  SgdOptions opt_;
  Tensor buf_;
};

}  // namespace mpicnn
