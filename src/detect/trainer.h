// `./train --task detection`: Faster R-CNN trained data-parallel over the ranks on a Pascal VOC
// folder, as the classifier trainer does it: equal steps on every rank from a padded, seeded
// epoch order (dist/shard.h), gradients averaged over the ranks (dist/grad_sync.h), SGD or
// AdamW with the same schedules, checkpoints and --resume (io/checkpoint.h), evaluation of
// VOC mAP@0.5 and COCO mAP@[.5:.95] with a per-class table after each --eval-every epochs.
// Not option parsing (train/options.h) and not the classifier trainer (train/trainer.h).
#pragma once
#include <cmath>
#include <memory>
#include <ostream>
#include <string>

#include "detect/map_eval.h"
#include "dist/comm.h"
#include "io/checkpoint.h"
#include "models/model.h"
#include "train/options.h"

namespace mpicnn::detect {

struct DetectionTrainResult {
  std::unique_ptr<Model> model;  // this rank's replica after the last step
  TrainerState state;
  std::string run_dir;
  MapResult eval;             // the last evaluation (NaNs when none ran)
  double train_loss = NAN;    // the last epoch's mean total loss over all ranks
  double images_per_s = 0;    // training images over all ranks per second of step loops
  bool stopped = false;       // a stop signal ended the run (after a checkpoint)
};

// Collective: every rank calls it with the same options (o.task == "detection"). `out` gets
// rank 0's lines. Data layout: -d DIR holding train/ and test/ VOC folders (test/ evaluated),
// or DIR itself a VOC folder (no evaluation). Errors found while reading data or checkpoints
// are dist::SharedError on every rank.
DetectionTrainResult run_detection_training(const train::TrainOptions& o, const dist::Comm& comm,
                                            std::ostream& out);

}  // namespace mpicnn::detect
