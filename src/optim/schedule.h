// Learning-rate schedules: the lr at (epoch, step within epoch), as torch's StepLR, MultiStepLR
// and CosineAnnealingLR closed forms, optionally after a linear warmup (LinearLR + SequentialLR).
// Not stateful and not an optimizer: the lr is a pure function of the position, so a resumed
// run gets the same lrs; the trainer calls optimizer.set_lr(schedule.lr(...)) before each step.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace mpicnn {

class LrSchedule {
 public:
  enum class Kind { Constant, Step, MultiStep, Cosine, Poly };

  // base_lr: finite, >= 0. step_size >= 1 and milestones (strictly increasing, >= 1) count
  // epochs after warmup; gamma: finite, > 0. cosine: t_max > 0 epochs, eta_min >= 0; past
  // t_max it follows torch's closed form (the cosine rises again).
  static LrSchedule constant(double base_lr);
  static LrSchedule step(double base_lr, int64_t step_size, double gamma);
  static LrSchedule multistep(double base_lr, std::vector<int64_t> milestones, double gamma);
  static LrSchedule cosine(double base_lr, double t_max, double eta_min = 0);
  // Polynomial decay (MLPerf's ResNet-50 LARS schedule; torch's PolynomialLR when end_lr is 0):
  // end_lr + (base_lr - end_lr) * (1 - min(t, t_max) / t_max)^power, per step; power > 0.
  static LrSchedule poly(double base_lr, double t_max, double power, double end_lr = 0);

  // This schedule after `epochs` warmup epochs whose lr rises linearly, step by step, from
  // start_factor * base_lr to base_lr (start_factor in (0, 1]). The main schedule then starts
  // at its own epoch 0, as torch's SequentialLR(LinearLR, main, milestones=[epochs]); so with
  // warmup a cosine's t_max counts the epochs after warmup. epochs = 0: no warmup.
  LrSchedule with_warmup(int64_t epochs, double start_factor) const;

  // The lr for step `step` (0-based) of epoch `epoch` (0-based), with steps_per_epoch >= 1
  // steps per epoch. At step 0 this is torch's per-epoch value for that epoch; in between,
  // warmup and cosine move per step, step and multistep decay at epoch boundaries.
  double lr(int64_t epoch, int64_t step, int64_t steps_per_epoch) const;
  // The same for a fractional epoch count t >= 0 (epoch + step / steps_per_epoch).
  double lr_at(double t) const;

  Kind kind() const { return kind_; }
  double base_lr() const { return base_lr_; }
  int64_t warmup_epochs() const { return warmup_epochs_; }
  // One line for logs: "cosine(lr=0.1, T_max=85, eta_min=0) after 5 warmup epochs from 0.1x".
  std::string describe() const;

 private:
  LrSchedule() = default;
  double main_lr(double t) const;  // t: epochs since warmup ended
  Kind kind_ = Kind::Constant;
  double base_lr_ = 0;
  int64_t step_size_ = 1;
  std::vector<int64_t> milestones_;
  double gamma_ = 1, t_max_ = 1, eta_min_ = 0, power_ = 1;  // eta_min_: poly's end lr too
  int64_t warmup_epochs_ = 0;
  double warmup_start_ = 1;
};

// Builds a schedule from a command-line spec:
//   [warmup:W[:START]+]MAIN      W warmup epochs (>= 1) from START * base_lr (default 0.1)
//   MAIN = constant | step:STEP_SIZE:GAMMA | multistep:M1,M2,...:GAMMA | cosine[:ETA_MIN]
//          | poly[:POWER[:END_LR]]
// cosine's and poly's T_max is the epochs after warmup (total_epochs - W), so they end at
// ETA_MIN / END_LR (default 0; poly's POWER default 2, MLPerf's). Examples: "step:30:0.1",
// "multistep:30,60,80:0.1", "warmup:5+cosine", "warmup:2+poly:2:0.0001".
// A bad spec is one Error naming the spec and what is wrong with it.
LrSchedule parse_lr_schedule(const std::string& spec, double base_lr, int64_t total_epochs);

// The linear scaling rule (Goyal et al. 2017): base_lr * global_batch / reference_batch.
double scale_lr(double base_lr, int64_t global_batch, int64_t reference_batch = 256);

}  // namespace mpicnn
