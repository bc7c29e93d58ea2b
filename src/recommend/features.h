// What the recommender sees of a configuration: numeric features from a RunConfig (the run
// facts plus derived quantities that make time and accuracy learnable), the key that says two
// runs are the same configuration, and the two baselines the boosted trees must beat.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "recommend/runs.h"

namespace mpicnn::recommend {

// Feature names, in the order of the vectors below. The time model sees the configuration;
// the top-1 model also sees how far training has got (epoch, steps and images so far).
const std::vector<std::string>& time_feature_names();
const std::vector<std::string>& top1_feature_names();
std::vector<float> time_features(const RunConfig& c);
std::vector<float> top1_features(const RunConfig& c, int epoch);

// Derived quantities (shared with the baselines and suggest).
double samples_per_rank(const RunConfig& c);  // ceil(N / ranks) distributed, else N
double steps_per_epoch(const RunConfig& c);   // ceil(samples_per_rank / batch)
// Multiply-adds of one epoch's training over all ranks: images x forward MACs x 3 (forward,
// and backward's two products).
double work_per_epoch(const RunConfig& c);
// Cores the run can actually use: ranks x threads, capped by the nodes' cores.
double effective_cores(const RunConfig& c);

// The configuration's settings without seed and epochs: runs with the same key are repeats,
// and leave-one-configuration-out CV holds them out together.
std::string config_key(const RunConfig& c);

// Time baseline: least squares of log(seconds per epoch) on log(work per epoch) and
// log(effective cores): a FLOPs / throughput scaling law, fitted to the training runs.
struct TimeBaseline {
  std::vector<double> coef;  // a, b, c of log s = a + b log work + c log cores
  void fit(const std::vector<RunConfig>& configs, const std::vector<double>& seconds);
  double predict_log_seconds(const RunConfig& c) const;
};

// Top-1 baseline: the mean top-1 of the training rows of the same model, dataset and epoch;
// failing that, of the same dataset and epoch, of the epoch, of everything.
struct Top1Baseline {
  std::map<std::string, std::pair<double, int>> sums;  // key -> (sum, count)
  void add(const RunConfig& c, int epoch, double top1);
  double predict(const RunConfig& c, int epoch) const;
};

}  // namespace mpicnn::recommend
