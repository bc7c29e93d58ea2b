// The Trainer class behind run_training (trainer.h), shared by trainer.cpp (the setup: device,
// the task's data and model replica, optimizer, resume, run directory) and trainer_epochs.cpp
// (epochs, the step, evaluation, checkpoints, the end of a run). What the run learns is its
// TrainTask's (task.h). Internal to src/train: nothing else includes it.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"
#include "core/timer.h"
#include "dist/comm.h"
#include "dist/grad_sync.h"
#include "dist/shard.h"
#include "io/checkpoint.h"
#include "io/progress.h"
#include "io/tracking.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "train/fp16_scaler.h"
#include "train/task.h"
#include "train/trainer.h"

namespace mpicnn::train {

// Where a run starts: rank 0 reads it from the checkpoint of --resume (zeros for a fresh run)
// and every rank receives it as one unit.
struct ResumePoint {
  int64_t epoch = 0, step_in_epoch = 0, global_step = 0, samples_seen = 0;  // as TrainerState
  FP16LossScaler::State scaler;
};

// What the ranks add up after every step (one allreduce).
struct StepTotals {
  double loss_sum = 0;             // loss x samples
  double samples = 0;
  double stop_votes = 0;           // ranks asked to stop (a signal)
  std::vector<double> part_sums;   // each part of the loss x samples (TrainTask::loss_parts)
};

// The current epoch's training, over all ranks, for its log line.
struct EpochTotals {
  double seconds = 0, loss_sum = 0, samples = 0;
  std::vector<double> part_sums;
  double loader_wait = 0;  // this rank's seconds waiting for batches
};

// One rank's part of a run. The constructor sets everything up (collective); then
// train_epoch, end_epoch once the epoch is complete, and finish or stop (run_training).
class Trainer {
 public:
  Trainer(const TrainOptions& o, const dist::Comm& comm, std::ostream& out,
          const TrainHooks& hooks);

  const TrainerState& state() const { return state_; }
  // The current epoch's remaining steps; true when a stop was requested (the same on every
  // rank, after the same step).
  bool train_epoch();
  bool epoch_complete() const { return state_.step_in_epoch == epoch_steps_.steps; }
  void end_epoch();      // evaluation, the epoch's log line and checkpoint
  bool stop_agreed() const;  // whether any rank has a stop request now (collective)
  TrainResult stop();    // after a stop request: a checkpoint unless one was just written
  TrainResult finish();  // after the last epoch: the final checkpoint and summary

 private:
  void choose_same_device();
  void build_replica();
  void resume_or_start();
  ResumePoint load_resume_point();
  void check_mid_epoch_layout(const TrainerState& saved, const std::string& dir) const;
  void start_gradient_sync();
  void open_run();
  nlohmann::json run_facts() const;
  void print_header() const;

  StepTotals train_step(int64_t step);
  void advance(int64_t samples);
  void log_step(int64_t step, const StepTotals& totals, double seconds);
  void check_replicas_in_sync() const;
  void share_batchnorm_statistics();
  void save(const std::string& why);
  void log_checkpoint_artifacts(const CheckpointPaths& p);
  TrainResult result();

  const TrainOptions& o_;
  const dist::Comm& comm_;
  std::ostream& out_;
  const TrainHooks& hooks_;
  Timer run_clock_;
  int threads_ = 1;
  ExecConfig exec_;  // how this rank's steps execute (core/device.h), chosen once
  bool fp16_ = false;

  std::unique_ptr<TrainTask> task_;
  std::vector<LossPart> loss_parts_;
  TrainResult result_;  // result_.model is this rank's replica
  Model* model_ = nullptr;
  dist::EpochSteps epoch_steps_;
  double base_lr_ = 0;
  std::optional<LrSchedule> schedule_;
  std::unique_ptr<Optimizer> opt_;

  TrainerState state_;
  std::string run_dir_, resumed_from_;
  std::string init_line_;  // rank 0, a fresh run with --init-weights: what it loaded
  // d(mean loss over the global batch) / d(this rank's mean loss): the loss gradient carries the
  // average over ranks, so the gradient allreduce only sums.
  float grad_average_factor_ = 1;
  FP16LossScaler scaler_;
  std::optional<dist::GradSync> sync_;
  std::optional<RunTracker> tracker_;  // rank 0
  std::optional<Progress> progress_;

  EpochTotals epoch_;
  bool saved_last_ = false;  // the last epoch's end wrote a checkpoint
  double train_seconds_ = 0, comm_wait_ = 0, step_time_ = 0;
  int64_t images_this_process_ = 0;
};

}  // namespace mpicnn::train
