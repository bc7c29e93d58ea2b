// What a training run learns, as the one Trainer (trainer_class.h) asks it: a task opens its
// data, builds the model replica, runs a batch's forward, loss and backward, evaluates, and says
// what a checkpoint must record to rebuild the model and its input. Everything else (resume,
// the run directory, gradient sync, watchdog context, fault points, schedules, tracking,
// progress, checkpoints, stop signals) is the Trainer's, the same for every task. Two tasks:
// classification (classify_task.cpp) and Faster R-CNN detection (detect_task.cpp).
#pragma once
#include <cmath>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/device.h"
#include "dist/comm.h"
#include "io/checkpoint.h"
#include "models/model.h"
#include "train/options.h"

namespace mpicnn::train {

// One step's loss on this rank: the mean over its batch, and the task's parts of it (named by
// TrainTask::loss_parts), each a mean over the batch.
struct StepLoss {
  double loss = 0;
  std::vector<double> parts;
};

// A named figure of an evaluation or an epoch (EpochRecord::metrics).
using Metric = std::pair<std::string, double>;

// An evaluation over the task's evaluation data, the same on every rank.
struct Evaluation {
  double loss = NAN, top1 = NAN, top5 = NAN;  // classifiers (NaN: not measured)
  std::vector<Metric> metrics;                // the task's own figures: the epoch's record, the summary
  std::string lines;                          // printed by rank 0 after the epoch's line
  std::string result;                         // the run's result for its done: line
};

// One part of the loss: its key in the epoch's record ("loss_classifier") and its label in the
// epoch's line ("classifier").
struct LossPart {
  std::string key, label;
};

class TrainTask {
 public:
  virtual ~TrainTask() = default;

  // Whether the task's model computes on the CPU only (then --device auto means the CPU).
  virtual bool cpu_only() const { return false; }

  // ---- setup: collective, each called once, in this order ----
  // The training and evaluation data (errors are SharedError on every rank); records their
  // paths and the validation hold-out in `state`.
  virtual void open_data(TrainerState& state) = 0;
  // Samples in the training data (every rank knows it).
  virtual uint64_t train_size() const = 0;
  // This rank's replica on exec's device, planned as exec says and ready for a batch of
  // --batch-size (the task keeps a pointer to it for the steps); the same weights on every
  // rank before resume.
  virtual std::unique_ptr<Model> build_model(const ExecConfig& exec) = 0;
  // Rank 0, a fresh run given --init-weights: loads them into the replica; the header's line.
  virtual std::string load_init_weights() = 0;
  // What evaluation needs to rebuild the model and prepare its input (state.input,
  // state.model_options), from nothing but the checkpoint.
  virtual void record(TrainerState& state) const = 0;
  // Whether gradient buckets may start while backward runs (GradSync::attach): false when
  // parameters finish their gradients out of registration order.
  virtual bool sync_during_backward() const = 0;

  // ---- what the run reports ----
  virtual std::string data_description() const = 0;  // "Fashion-MNIST (IDX) ... (60000 images)"
  virtual std::string header_lines() const = 0;       // "\n  test data: ..." lines of the header
  virtual nlohmann::json facts() const = 0;           // RunInfo::facts of the task's data and model
  virtual std::vector<LossPart> loss_parts() const { return {}; }

  // ---- epochs ----
  // This rank's batches of the epoch, less its first `skip` samples (those of the steps a
  // resumed epoch already trained).
  virtual void begin_epoch(int64_t epoch, int64_t skip) = 0;
  // The next batch: forward and loss. Returns the batch's size (the same on every rank).
  // `micro`: which micro-batch of the optimizer step this is (--accumulate), for the draws.
  virtual int forward(int64_t global_step, int micro) = 0;
  // Backward of the loss with its gradient scaled by `scale`.
  virtual void backward(float scale) = 0;
  // The last forward's loss (read after backward: on a GPU it waits for the device).
  virtual StepLoss loss() = 0;
  // After the epoch's last step (or a stop): the seconds this rank waited for its batches.
  virtual double end_epoch() { return 0; }
  // Whether there is evaluation data (then evaluate runs after every --eval-every epochs).
  virtual bool can_evaluate() const = 0;
  // Collective: the replica (with rank 0's BatchNorm statistics) over the evaluation data; the
  // model is back in training mode after it. `last`: the run's final evaluation.
  virtual Evaluation evaluate(bool last) = 0;
};

std::unique_ptr<TrainTask> make_classify_task(const TrainOptions& o, const dist::Comm& comm);
std::unique_ptr<TrainTask> make_detection_task(const TrainOptions& o, const dist::Comm& comm);

}  // namespace mpicnn::train
