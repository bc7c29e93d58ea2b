#include "recommend/features.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/check.h"

namespace mpicnn::recommend {

namespace {

double log1(double x) { return std::log(std::max(x, 1.0)); }
double ranks_per_node(const RunConfig& c) {
  return std::ceil(double(std::max(c.ranks, 1)) / double(std::max(c.nodes, 1)));
}
// Cores one rank gets: its threads, or its share of the node when ranks oversubscribe it.
double core_share(const RunConfig& c) {
  const double t = std::max(c.threads_per_rank, 1);
  if (c.cpus_per_node <= 0) return t;
  return std::min(t, double(c.cpus_per_node) / ranks_per_node(c));
}

const std::vector<std::string> kTimeNames = {
    "log_model_macs", "log_model_params", "log_train_samples", "image_size", "channels",
    "num_classes", "ranks", "nodes", "threads_per_rank", "cores", "effective_cores",
    "oversubscription", "workers", "batch_per_rank", "global_batch", "distribute_data", "cuda",
    "cpus_per_node", "learning_rate", "log_samples_per_rank", "steps_per_epoch",
    "log_work_per_rank", "log_work_per_core", "log_comm_per_epoch", "synthetic_data", "file_data"};

std::vector<std::string> top1_names() {
  std::vector<std::string> n = kTimeNames;
  n.insert(n.end(), {"epoch", "log_steps_done", "log_images_seen"});
  return n;
}

}  // namespace

double samples_per_rank(const RunConfig& c) {
  const double n = double(std::max<int64_t>(c.train_samples, 1));
  return c.distribute_data ? std::ceil(n / double(std::max(c.ranks, 1))) : n;
}

double steps_per_epoch(const RunConfig& c) {
  return std::ceil(samples_per_rank(c) / double(std::max(c.batch_per_rank, 1)));
}

double work_per_epoch(const RunConfig& c) {
  return samples_per_rank(c) * std::max(c.ranks, 1) * std::max(c.model_macs, 1.0) * 3;
}

double effective_cores(const RunConfig& c) {
  const double cores = std::max(c.cores(), 1);
  if (c.cpus_per_node <= 0) return cores;
  return std::min(cores, double(c.cpus_per_node) * std::max(c.nodes, 1));
}

const std::vector<std::string>& time_feature_names() { return kTimeNames; }
const std::vector<std::string>& top1_feature_names() {
  static const std::vector<std::string> names = top1_names();
  return names;
}

std::vector<float> time_features(const RunConfig& c) {
  const double spr = samples_per_rank(c), macs = std::max(c.model_macs, 1.0);
  const double work_rank = spr * macs * 3;
  const double ranks = std::max(c.ranks, 1);
  const double oversub = c.cpus_per_node > 0 ? double(c.cores()) / (double(c.cpus_per_node) * std::max(c.nodes, 1)) : 0;
  // Gradient allreduce volume of an epoch: parameters x steps x 2 (K-1)/K (a ring's traffic).
  const double comm = c.model_params * steps_per_epoch(c) * 2 * (ranks - 1) / ranks;
  const std::vector<double> v = {
      log1(macs), log1(c.model_params), log1(double(c.train_samples)), double(c.image_size),
      double(c.channels), double(c.num_classes), ranks, double(std::max(c.nodes, 1)),
      double(c.threads_per_rank), double(c.cores()), effective_cores(c), oversub, double(c.workers),
      double(c.batch_per_rank), double(c.global_batch()), c.distribute_data ? 1.0 : 0.0,
      c.device == "cuda" ? 1.0 : 0.0, double(c.cpus_per_node), c.learning_rate, log1(spr),
      steps_per_epoch(c), log1(work_rank), log1(work_rank / core_share(c)), log1(comm),
      c.dataset == "synthetic" ? 1.0 : 0.0,
      // Image files (CSV, image folder) are decoded per sample: slower than in-memory data.
      c.dataset == "csv" || c.dataset == "imagefolder" ? 1.0 : 0.0};
  MPICNN_CHECK(v.size() == kTimeNames.size(), "features: ", v.size(), " values for ", kTimeNames.size(), " names");
  return std::vector<float>(v.begin(), v.end());
}

std::vector<float> top1_features(const RunConfig& c, int epoch) {
  std::vector<float> v = time_features(c);
  const double images = samples_per_rank(c) * std::max(c.ranks, 1);
  v.push_back(float(epoch));
  v.push_back(float(log1(epoch * steps_per_epoch(c))));
  v.push_back(float(log1(epoch * images)));
  return v;
}

std::string config_key(const RunConfig& c) {
  std::ostringstream o;
  o << c.model << '|' << c.dataset << '|' << c.data_path << '|' << c.device << '|' << c.ranks << '|'
    << c.nodes << '|' << c.threads_per_rank << '|' << c.workers << '|' << c.batch_per_rank << '|'
    << c.distribute_data << '|' << c.channels << 'x' << c.image_size << '|' << c.train_samples << '|'
    << c.learning_rate << '|' << c.optimizer << '|' << c.cpu_model << '|' << c.gpu_model << '|'
    << c.cpus_per_node;
  return o.str();
}

// ---- baselines ----------------------------------------------------------------------------------

void TimeBaseline::fit(const std::vector<RunConfig>& configs, const std::vector<double>& seconds) {
  CHECK(configs.size() == seconds.size() && !configs.empty(), "time baseline: no runs");
  // Normal equations of [1, log work, log cores]; a small ridge keeps them solvable when every
  // run has the same cores (the slope then stays near 0).
  double A[3][4] = {};
  for (size_t i = 0; i < configs.size(); ++i) {
    const double x[3] = {1, std::log(work_per_epoch(configs[i])), std::log(effective_cores(configs[i]))};
    const double y = std::log(std::max(seconds[i], 1e-6));
    for (int r = 0; r < 3; ++r) {
      for (int k = 0; k < 3; ++k) A[r][k] += x[r] * x[k];
      A[r][3] += x[r] * y;
    }
  }
  for (int r = 1; r < 3; ++r) A[r][r] += 1e-6 * (1 + A[r][r]);
  for (int p = 0; p < 3; ++p) {  // Gaussian elimination with partial pivoting
    int best = p;
    for (int r = p + 1; r < 3; ++r)
      if (std::fabs(A[r][p]) > std::fabs(A[best][p])) best = r;
    std::swap(A[p], A[best]);
    for (int r = 0; r < 3; ++r) {
      if (r == p || A[p][p] == 0) continue;
      const double f = A[r][p] / A[p][p];
      for (int k = p; k < 4; ++k) A[r][k] -= f * A[p][k];
    }
  }
  coef.assign(3, 0);
  for (int r = 0; r < 3; ++r) coef[r] = A[r][r] != 0 ? A[r][3] / A[r][r] : 0;
}

double TimeBaseline::predict_log_seconds(const RunConfig& c) const {
  CHECK(coef.size() == 3, "time baseline: not fitted");
  return coef[0] + coef[1] * std::log(work_per_epoch(c)) + coef[2] * std::log(effective_cores(c));
}

namespace {
std::vector<std::string> top1_keys(const RunConfig& c, int epoch) {
  const std::string e = std::to_string(epoch);
  return {c.model + '|' + c.dataset + '|' + e, "*|" + c.dataset + '|' + e, "*|*|" + e, "*|*|*"};
}
}  // namespace

void Top1Baseline::add(const RunConfig& c, int epoch, double top1) {
  for (const std::string& k : top1_keys(c, epoch)) {
    auto& [sum, n] = sums[k];
    sum += top1;
    ++n;
  }
}

double Top1Baseline::predict(const RunConfig& c, int epoch) const {
  for (const std::string& k : top1_keys(c, epoch)) {
    const auto it = sums.find(k);
    if (it != sums.end() && it->second.second > 0) return it->second.first / it->second.second;
  }
  return 0;
}

}  // namespace mpicnn::recommend
