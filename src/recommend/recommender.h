// The recommender: gradient-boosted trees (XGBoost's C API) that predict a configuration's
// seconds per epoch and its test top-1 after each epoch, trained on runs (runs.h), plus the
// scaling baseline they must beat. Saved as one JSON file holding the boosters, the feature
// list and the cross-validation figures (`recommend fit -o model.json`).
#pragma once
#include <string>
#include <vector>

#include "recommend/runs.h"

namespace mpicnn::recommend {

struct Prediction {
  double seconds_per_epoch = 0, seconds_sd = 0;  // mean and spread of the ensemble
  std::vector<double> top1, top1_sd;              // after epoch 1, 2, ... (fractions)
};

class Recommender {
 public:
  Recommender();
  ~Recommender();
  Recommender(Recommender&&) noexcept;
  Recommender& operator=(Recommender&&) noexcept;

  // Reads a model written by `recommend fit`; an Error naming the file when it is not one.
  static Recommender load(const std::string& path);
  // Predicted seconds per epoch and top-1 after epochs 1..epochs for a configuration.
  Prediction predict(const RunConfig& config, int epochs) const;

 private:
  struct Impl;
  Impl* impl_ = nullptr;
};

struct SuggestQuery {
  std::string model;          // --model
  std::string data;           // --data: a dataset path or kind (synthetic, fashion-mnist)
  double target_top1 = -1;    // < 0: rank by time per epoch only
  int max_ranks = 4, max_nodes = 1;
  int max_epochs = 10;        // epochs a candidate may need to reach the target
  int top = 5;                // suggestions returned
  std::string device = "cpu";
};

struct Suggestion {
  RunConfig config;
  Prediction prediction;
  int epochs_to_target = 0;      // first epoch predicted >= target (0: never within max_epochs)
  double seconds_to_target = 0;  // epochs_to_target x seconds per epoch (or one epoch's time)
  double core_hours = 0;         // seconds_to_target x cores / 3600 (GPU-hours for cuda)
};

// Candidate configurations for the query on this machine's kind of hardware (ranks, threads,
// batch, workers), predicted and ranked by time to the target (then core-hours). The model's
// and data's facts (multiply-adds, parameters, samples, image size) are computed from the
// registry and the dataset, as the trainer records them. Errors name the bad query field.
std::vector<Suggestion> suggest(const Recommender& r, const SuggestQuery& q);

// The epoch a suggestion's top-1 is shown at: the one that reaches the target; when none does,
// the last predicted; with no target, epoch 1 (what seconds_to_target counts). 0 when nothing
// was predicted. What `suggest`'s table, its --json and `serve` show.
int top1_epoch(const SuggestQuery& q, const Suggestion& s);

}  // namespace mpicnn::recommend
