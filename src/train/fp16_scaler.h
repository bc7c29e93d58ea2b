// FP16LossScaler: dynamic loss scaling for fp16 training on the GPU. The loss gradient is
// multiplied by scale(); a step whose summed gradients hold an inf or NaN (the same on every
// rank after the allreduce) is skipped and halves the scale, and kGrowth clean steps in a row
// double it. Its state is part of a checkpoint, so a resumed run scales as an unbroken one.
// Not the 1/K gradient average (the trainer folds that into the loss gradient too).
#pragma once
#include <cstdint>

#include "core/tensor.h"
#include "io/checkpoint.h"
#include "optim/optimizer.h"

namespace mpicnn::train {

class FP16LossScaler {
 public:
  static constexpr int64_t kGrowth = 2000;    // clean steps in a row before the scale doubles
  static constexpr float kInitial = 65536.f;  // 2^16: a fresh run's scale
  static constexpr float kMax = 16777216.f;   // 2^24

  // What a checkpoint records (TrainerState's loss_scale, scale_clean_steps and
  // scale_skipped_steps); scale 0: none recorded (not an fp16 run).
  struct State {
    double scale = 0;
    int64_t clean_steps = 0;    // clean steps since the scale last changed
    int64_t skipped_steps = 0;  // steps skipped so far in the run
  };
  static State saved_in(const TrainerState& s) {
    return {s.loss_scale, s.scale_clean_steps, s.scale_skipped_steps};
  }

  FP16LossScaler() = default;  // disabled: scale 1, never skips
  // Enabled: continues `saved` when it holds a scale (a resume), else starts at kInitial.
  // Disabled (not an fp16 run): scale 1, and `saved` is ignored.
  FP16LossScaler(bool enabled, const State& saved);

  bool enabled() const { return enabled_; }
  float scale() const { return scale_; }  // the loss gradient's factor
  int64_t skipped_steps() const { return skipped_steps_; }

  // After the gradients are summed over ranks: whether the optimizer may step. Enabled, an
  // overflow in `grads` skips the step and halves the scale; otherwise `opt` is told to divide
  // the gradients by the scale, which then grows if due. Disabled: always true, `opt` untouched.
  bool accept(const Tensor& grads, Optimizer& opt);

  // Writes the scaler into a checkpoint's state (enabled only: a disabled scaler leaves
  // whatever `state` holds).
  void record(TrainerState& state) const;

 private:
  bool enabled_ = false;
  float scale_ = 1.f;
  int64_t clean_steps_ = 0, skipped_steps_ = 0;
};

}  // namespace mpicnn::train
