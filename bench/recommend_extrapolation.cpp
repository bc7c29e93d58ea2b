// How the recommender's time model extrapolates in work: fits on the runs with the smallest work
// per epoch (recommend/features.h work_per_epoch) and predicts the largest FRACTION of them,
// the situation of `recommend suggest` for a model or dataset bigger than the sweep's.
//   build/release/bench/recommend_extrapolation RUNS [FRACTION=0.2]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>

#include "core/check.h"
#include "io/atomic_file.h"
#include "recommend/features.h"
#include "recommend/fit.h"
#include "recommend/recommender.h"

using namespace mpicnn::recommend;

int main(int argc, char** argv) try {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s RUNS [FRACTION]\n", argv[0]);
    return 2;
  }
  std::vector<RunRecord> runs;
  for (RunRecord& r : load_runs({argv[1]}))
    if (r.finished() && r.seconds_per_epoch() > 0) runs.push_back(std::move(r));
  const double fraction = argc > 2 ? std::stod(argv[2]) : 0.2;
  std::sort(runs.begin(), runs.end(), [](const RunRecord& a, const RunRecord& b) {
    return work_per_epoch(a.config) < work_per_epoch(b.config);
  });
  const size_t cut = size_t(double(runs.size()) * (1 - fraction));
  const std::vector<RunRecord> train(runs.begin(), runs.begin() + long(cut)), test(runs.begin() + long(cut), runs.end());
  const FitResult fit = fit_recommender(train, FitOptions{});
  const std::string path = (std::filesystem::temp_directory_path() / "recommend_extrapolation.json").string();
  const std::string text = fit.model.dump();
  mpicnn::write_file_atomic(path, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
  const Recommender rec = Recommender::load(path);
  std::filesystem::remove(path);
  std::vector<RunConfig> configs;
  std::vector<double> seconds;
  for (const RunRecord& r : train) configs.push_back(r.config), seconds.push_back(r.seconds_per_epoch());
  TimeBaseline base;
  base.fit(configs, seconds);
  double mae = 0, mape = 0, base_mae = 0;
  for (const RunRecord& r : test) {
    const double s = r.seconds_per_epoch(), p = rec.predict(r.config, 1).seconds_per_epoch;
    mae += std::fabs(p - s), mape += std::fabs(p / s - 1);
    base_mae += std::fabs(std::exp(base.predict_log_seconds(r.config)) - s);
  }
  const double n = double(test.size());
  std::printf("trained on %zu runs, predicted the %zu with the most work: model MAE %.3f s (mean |error| %.1f%%), "
              "baseline MAE %.3f s\n", train.size(), test.size(), mae / n, 100 * mape / n, base_mae / n);
  return 0;
} catch (const mpicnn::Error& e) {
  std::fprintf(stderr, "recommend_extrapolation: %s\n", e.message().c_str());
  return 1;
}
