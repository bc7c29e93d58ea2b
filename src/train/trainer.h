// The data-parallel training loop of `./train`: every rank holds a replica of the model, trains
// on its shard of each epoch (dist/shard.h), and averages gradients with the overlapped bucket
// allreduce (dist/grad_sync.h) before the same optimizer step. Rank 0 reads data and
// checkpoints, writes the run directory (io/checkpoint.h, io/tracking.h) and shows progress.
// Not option parsing (train/options.h) and not main (src/apps/train.cpp).
//
// Equal steps: every rank runs the same number of steps with the same batch size at every step
// (shard.h says how the tail is padded), so no collective waits forever on uneven data.
//
// BatchNorm over ranks follows PyTorch DistributedDataParallel (broadcast_buffers=True): batch
// statistics are computed per rank from its own per-rank batch (no SyncBatchNorm), and the
// running statistics that count are rank 0's: they are broadcast to every rank before each
// evaluation and are the ones rank 0 checkpoints. (DDP broadcasts them before every forward;
// in training mode running statistics are never read, so broadcasting them only where they
// are read gives the same numbers.)
#pragma once
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>

#include "dist/comm.h"
#include "io/checkpoint.h"
#include "models/model.h"
#include "optim/optimizer.h"
#include "train/options.h"

namespace mpicnn::train {

struct TrainHooks {
  // After every optimizer step, on every rank, with the state after that step (tests raise a
  // stop signal here to check that a stopped and resumed run ends bit-identical).
  std::function<void(const TrainerState&)> after_step;
};

struct TrainResult {
  std::unique_ptr<Model> model;  // this rank's replica after the last step
  TrainerState state;            // where the run ended
  std::string run_dir;           // empty on ranks other than 0
  bool stopped = false;          // a stop signal ended the run early (after a checkpoint)
  int stop_signal = 0;
  double train_loss = NAN;       // mean over the last epoch's samples, over all ranks
  double test_loss = NAN, top1 = NAN, top5 = NAN;  // the last evaluation; NaN if none
  std::vector<std::pair<std::string, double>> metrics;  // the last evaluation's own figures (mAP)
  std::string result;                                   // "test top-1 91.10%"; empty if none
  double train_seconds = 0;      // step loops of this process's epochs, without evaluation
  double images_per_s = 0;       // training images over all ranks per train_seconds
  double comm_share = 0;         // share of step time blocked on gradient communication
};

// Collective: every rank calls it with the same options. `out` gets rank 0's log lines and
// progress (other ranks write nothing). Errors found on rank 0 before or between collectives
// (a missing dataset, a bad checkpoint, a failed save) are dist::SharedError on every rank;
// any other exception may leave other ranks inside a collective, and the caller must end the
// job (Comm::fail_job).
TrainResult run_training(const TrainOptions& options, const dist::Comm& comm, std::ostream& out,
                         const TrainHooks& hooks = {});

// The options a resume continues with: the checkpoint's recorded configuration, overridden by
// whatever `args` (the command line after the program name, holding --resume) set
// explicitly. --resume and --save-dir are taken from `args` only. Reads the checkpoint's
// trainer.json (errors name it).
TrainOptions resume_options(const std::vector<std::string>& args);

}  // namespace mpicnn::train
