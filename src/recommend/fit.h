// Fitting the recommender (recommender.h) on runs: the training rows, the k-fold and
// leave-one-configuration-out cross-validation next to the baselines (features.h), and the
// model document `recommend fit -o model.json` writes and Recommender::load reads.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "recommend/runs.h"

namespace mpicnn::recommend {

inline constexpr const char* kModelFormat = "mpicnn-recommender";
inline constexpr int kModelVersion = 1;
inline constexpr int kMinRuns = 5;  // fewer finished runs cannot be cross-validated sensibly

struct FitOptions {
  int folds = 5;
  uint64_t seed = 0;
  int rounds = 200;     // boosting rounds per model
  int max_depth = 3;
  double eta = 0.05;
  // The time model's trees start from the baseline's log-time prediction (base margin) and
  // learn its residual, so they extrapolate in work and cores as the scaling law does.
  bool time_from_baseline = true;
};

struct CvFigure {
  std::string target;  // "seconds_per_epoch" or "top1"
  std::string scheme;  // "kfold" or "loco"
  int folds = 0, rows = 0;
  double mae = 0, rmse = 0, baseline_mae = 0, baseline_rmse = 0;
  nlohmann::json to_json() const;
};

struct FitResult {
  nlohmann::json model;  // the document for model.json
  std::vector<CvFigure> cv;
  int runs = 0, time_rows = 0, top1_rows = 0, configurations = 0;
};

// Fits on the FINISHED runs (their epochs with a top-1 for accuracy); an Error when fewer than
// kMinRuns finished runs are given.
FitResult fit_recommender(const std::vector<RunRecord>& runs, const FitOptions& o);
// The CV table as `recommend fit` prints it, with a line per target the model does not beat.
std::string cv_table(const FitResult& r);

}  // namespace mpicnn::recommend
