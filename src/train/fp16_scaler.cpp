// FP16LossScaler: the scale's halving on overflow and growth after clean steps.
#include "train/fp16_scaler.h"

#include <algorithm>

#include "core/gpu.h"

namespace mpicnn::train {

FP16LossScaler::FP16LossScaler(bool enabled, const State& saved) : enabled_(enabled) {
  if (!enabled) return;
  const bool resume = saved.scale >= 1;
  scale_ = resume ? float(saved.scale) : kInitial;
  clean_steps_ = resume ? saved.clean_steps : 0;
  skipped_steps_ = resume ? saved.skipped_steps : 0;
}

bool FP16LossScaler::accept(const Tensor& grads, Optimizer& opt) {
  if (!enabled_) return true;
  if (!gpu::backend().all_finite(grads.data(), grads.numel())) {
    scale_ = std::max(scale_ / 2, 1.f);  // overflow: skip the update
    clean_steps_ = 0;
    ++skipped_steps_;
    return false;
  }
  opt.set_grad_scale(1.f / scale_);
  if (++clean_steps_ % kGrowth == 0) scale_ = std::min(scale_ * 2, kMax);
  return true;
}

void FP16LossScaler::record(TrainerState& state) const {
  if (!enabled_) return;
  state.loss_scale = scale_;
  state.scale_clean_steps = clean_steps_;
  state.scale_skipped_steps = skipped_steps_;
}

}  // namespace mpicnn::train
