// `recommend fit`: the training rows, cross-validation against the baselines, the ensemble
// (one model per k-fold fold, so predictions come with a spread) and model.json.
#include "recommend/fit.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <iostream>
#include <map>
#include <numeric>
#include <random>
#include <sstream>

#include "core/check.h"
#include "core/cli.h"
#include "io/atomic_file.h"
#include "recommend/commands.h"
#include "recommend/features.h"
#include "recommend/xgb.h"

using nlohmann::json;

namespace mpicnn::recommend {

namespace {

// The training data: one time row per run, one top-1 row per (run, evaluated epoch).
struct Rows {
  std::vector<RunConfig> configs;  // per run
  std::vector<double> seconds;     // per run: mean seconds per epoch
  std::vector<int> top1_run, top1_epoch;
  std::vector<double> top1;
};

Rows training_rows(const std::vector<RunRecord>& runs) {
  Rows r;
  for (const RunRecord& run : runs) {
    if (!run.finished() || run.epochs.empty() || run.seconds_per_epoch() <= 0) continue;
    const int i = int(r.configs.size());
    r.configs.push_back(run.config);
    r.seconds.push_back(run.seconds_per_epoch());
    for (const EpochResult& e : run.epochs) {
      if (e.top1 < 0) continue;
      r.top1_run.push_back(i);
      r.top1_epoch.push_back(e.epoch);
      r.top1.push_back(e.top1);
    }
  }
  return r;
}

using Params = std::vector<std::pair<std::string, std::string>>;
Params xgb_params(const FitOptions& o, const char* objective, double base_score) {
  return {{"objective", objective},     {"max_depth", std::to_string(o.max_depth)},
          {"eta", std::to_string(o.eta)}, {"subsample", "0.8"},
          {"min_child_weight", "1"},    {"lambda", "1"},
          {"nthread", "1"},             {"verbosity", "0"},
          {"seed", std::to_string(o.seed)}, {"base_score", std::to_string(base_score)}};
}

// One ensemble member per target, trained on the runs where `train[run]`.
struct TimeMember {
  TimeBaseline baseline;
  xgb::Booster booster;
};

std::vector<float> flat_time(const Rows& d, const std::vector<int>& runs) {
  std::vector<float> x;
  for (int i : runs) {
    const std::vector<float> f = time_features(d.configs[i]);
    x.insert(x.end(), f.begin(), f.end());
  }
  return x;
}
std::vector<float> flat_top1(const Rows& d, const std::vector<int>& rows) {
  std::vector<float> x;
  for (int k : rows) {
    const std::vector<float> f = top1_features(d.configs[d.top1_run[k]], d.top1_epoch[k]);
    x.insert(x.end(), f.begin(), f.end());
  }
  return x;
}
std::vector<float> margins(const TimeBaseline& b, const Rows& d, const std::vector<int>& runs) {
  std::vector<float> m;
  for (int i : runs) m.push_back(float(b.predict_log_seconds(d.configs[i])));
  return m;
}

TimeMember train_time(const Rows& d, const std::vector<int>& runs, const FitOptions& o) {
  TimeMember m;
  std::vector<RunConfig> cs;
  std::vector<double> ss;
  std::vector<float> y;
  for (int i : runs) cs.push_back(d.configs[i]), ss.push_back(d.seconds[i]), y.push_back(float(std::log(d.seconds[i])));
  m.baseline.fit(cs, ss);
  xgb::DMatrix dm(flat_time(d, runs), runs.size(), time_feature_names().size());
  dm.set_labels(y);
  double base = 0;
  if (o.time_from_baseline)
    dm.set_base_margin(margins(m.baseline, d, runs));
  else
    base = std::accumulate(y.begin(), y.end(), 0.0) / double(y.size());
  m.booster = xgb::Booster::train(dm, xgb_params(o, "reg:squarederror", base), o.rounds);
  return m;
}

std::vector<double> predict_time(const TimeMember& m, const Rows& d, const std::vector<int>& runs, bool from_baseline) {
  xgb::DMatrix dm(flat_time(d, runs), runs.size(), time_feature_names().size());
  if (from_baseline) dm.set_base_margin(margins(m.baseline, d, runs));
  std::vector<double> s;
  for (float v : m.booster.predict(dm)) s.push_back(std::exp(double(v)));
  return s;
}

xgb::Booster train_top1(const Rows& d, const std::vector<int>& rows, const FitOptions& o) {
  std::vector<float> y;
  for (int k : rows) y.push_back(float(std::clamp(d.top1[k], 0.0, 1.0)));
  const double mean = std::clamp(std::accumulate(y.begin(), y.end(), 0.0) / double(y.size()), 0.01, 0.99);
  xgb::DMatrix dm(flat_top1(d, rows), rows.size(), top1_feature_names().size());
  dm.set_labels(y);
  return xgb::Booster::train(dm, xgb_params(o, "reg:logistic", mean), o.rounds);
}

struct Errors {
  double abs = 0, sq = 0, babs = 0, bsq = 0;
  int n = 0;
  void add(double truth, double model, double baseline) {
    abs += std::fabs(model - truth), sq += (model - truth) * (model - truth);
    babs += std::fabs(baseline - truth), bsq += (baseline - truth) * (baseline - truth);
    ++n;
  }
  CvFigure figure(const char* target, const char* scheme, int folds) const {
    CvFigure f{target, scheme, folds, n};
    if (n == 0) return f;
    f.mae = abs / n, f.rmse = std::sqrt(sq / n), f.baseline_mae = babs / n, f.baseline_rmse = std::sqrt(bsq / n);
    return f;
  }
};

// Cross-validation over a fold assignment of runs (rows of a run stay in its fold). Keeps the
// fold models in `time_models` / `top1_models` when given (the ensemble).
void cross_validate(const Rows& d, const std::vector<int>& fold_of, int folds, const FitOptions& o,
                    const char* scheme, std::vector<CvFigure>& out, std::vector<TimeMember>* time_models,
                    std::vector<xgb::Booster>* top1_models) {
  Errors te, ae;
  for (int f = 0; f < folds; ++f) {
    std::vector<int> train_runs, test_runs, train_rows, test_rows;
    for (int i = 0; i < int(d.configs.size()); ++i) (fold_of[i] == f ? test_runs : train_runs).push_back(i);
    for (int k = 0; k < int(d.top1.size()); ++k) (fold_of[d.top1_run[k]] == f ? test_rows : train_rows).push_back(k);
    if (test_runs.empty() || train_runs.empty()) continue;
    TimeMember tm = train_time(d, train_runs, o);
    const std::vector<double> pred = predict_time(tm, d, test_runs, o.time_from_baseline);
    for (size_t j = 0; j < test_runs.size(); ++j) {
      const RunConfig& c = d.configs[test_runs[j]];
      te.add(d.seconds[test_runs[j]], pred[j], std::exp(tm.baseline.predict_log_seconds(c)));
    }
    if (time_models) time_models->push_back(std::move(tm));
    if (train_rows.empty()) continue;
    Top1Baseline base;
    for (int k : train_rows) base.add(d.configs[d.top1_run[k]], d.top1_epoch[k], d.top1[k]);
    xgb::Booster b = train_top1(d, train_rows, o);
    if (!test_rows.empty()) {
      xgb::DMatrix dm(flat_top1(d, test_rows), test_rows.size(), top1_feature_names().size());
      const std::vector<float> p = b.predict(dm);
      for (size_t j = 0; j < test_rows.size(); ++j) {
        const int k = test_rows[j];
        ae.add(d.top1[k], p[j], base.predict(d.configs[d.top1_run[k]], d.top1_epoch[k]));
      }
    }
    if (top1_models) top1_models->push_back(std::move(b));
  }
  out.push_back(te.figure("seconds_per_epoch", scheme, folds));
  if (!d.top1.empty()) out.push_back(ae.figure("top1", scheme, folds));
}

json booster_json(const xgb::Booster& b) { return json::parse(b.save_json()); }

}  // namespace

json CvFigure::to_json() const {
  return {{"target", target}, {"scheme", scheme}, {"folds", folds}, {"rows", rows}, {"mae", mae}, {"rmse", rmse},
          {"baseline_mae", baseline_mae}, {"baseline_rmse", baseline_rmse}};
}

FitResult fit_recommender(const std::vector<RunRecord>& runs, const FitOptions& o) {
  CHECK(o.folds >= 2, "--folds: ", o.folds, " (need at least 2)");
  CHECK(o.rounds >= 1, "--rounds: ", o.rounds, " (need at least 1)");
  const Rows d = training_rows(runs);
  const int n = int(d.configs.size());
  CHECK(n >= kMinRuns, "RUNS: only ", n, " finished runs with timed epochs among the ", runs.size(),
        " given; need at least ", kMinRuns, " to fit and cross-validate");
  FitResult r;
  r.runs = n, r.time_rows = n, r.top1_rows = int(d.top1.size());
  // k-fold over runs, shuffled with the seed; its fold models are the ensemble.
  const int k = std::min(o.folds, n);
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(o.seed);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<int> fold_of(n);
  for (int i = 0; i < n; ++i) fold_of[order[i]] = i % k;
  std::vector<TimeMember> time_models;
  std::vector<xgb::Booster> top1_models;
  cross_validate(d, fold_of, k, o, "kfold", r.cv, &time_models, &top1_models);
  // Leave one configuration out: repeats of a configuration (other seeds or epochs) go together.
  std::map<std::string, int> config_index;
  for (int i = 0; i < n; ++i) fold_of[i] = config_index.emplace(config_key(d.configs[i]), int(config_index.size())).first->second;
  r.configurations = int(config_index.size());
  cross_validate(d, fold_of, r.configurations, o, "loco", r.cv, nullptr, nullptr);

  json tm = json::array(), am = json::array(), cv = json::array();
  for (const TimeMember& m : time_models) tm.push_back({{"baseline", m.baseline.coef}, {"booster", booster_json(m.booster)}});
  for (const xgb::Booster& b : top1_models) am.push_back({{"booster", booster_json(b)}});
  for (const CvFigure& f : r.cv) cv.push_back(f.to_json());
  int max_epoch = 0;
  for (int e : d.top1_epoch) max_epoch = std::max(max_epoch, e);
  r.model = {{"format", kModelFormat},
             {"version", kModelVersion},
             {"time_features", time_feature_names()},
             {"top1_features", top1_feature_names()},
             {"time_target", o.time_from_baseline ? "log seconds per epoch, boosted from the baseline's log seconds"
                                                  : "log seconds per epoch"},
             {"time_from_baseline", o.time_from_baseline},
             {"top1_target", "test top-1 after the epoch (reg:logistic)"},
             {"time_models", tm},
             {"top1_models", am},
             {"params", {{"folds", k}, {"seed", o.seed}, {"rounds", o.rounds}, {"max_depth", o.max_depth}, {"eta", o.eta}}},
             {"cv", cv},
             {"training_runs", n},
             {"training_rows", {{"time", r.time_rows}, {"top1", r.top1_rows}}},
             {"configurations", r.configurations},
             {"max_trained_epoch", max_epoch}};
  return r;
}

std::string cv_table(const FitResult& r) {
  std::ostringstream o;
  o << std::fixed;
  o << "target             CV        folds  rows   model MAE  model RMSE   base MAE  base RMSE  vs baseline\n";
  std::vector<std::string> worse;
  for (const CvFigure& f : r.cv) {
    const bool sec = f.target == "seconds_per_epoch";
    const int p = sec ? 3 : 4;
    const bool beats = f.mae < f.baseline_mae && f.rmse < f.baseline_rmse;
    o << std::left << std::setw(19) << (sec ? "seconds/epoch" : "top-1") << std::setw(10)
      << (f.scheme == "kfold" ? "k-fold" : "LOCO") << std::right << std::setw(5) << f.folds << std::setw(6) << f.rows
      << std::setprecision(p) << std::setw(12) << f.mae << std::setw(12) << f.rmse << std::setw(11)
      << f.baseline_mae << std::setw(11) << f.baseline_rmse << "  "
      << (beats ? "better" : f.mae < f.baseline_mae || f.rmse < f.baseline_rmse ? "mixed" : "WORSE") << "\n";
    if (!beats) worse.push_back(std::string(sec ? "seconds/epoch" : "top-1") + " (" + (f.scheme == "kfold" ? "k-fold" : "LOCO") + ")");
  }
  for (const std::string& w : worse)
    o << "note: the model does not beat the baseline on " << w << " in both MAE and RMSE\n";
  return o.str();
}

// ---- the command --------------------------------------------------------------------------------

namespace {

constexpr const char* kFitUsage = R"(Usage: ./recommend fit RUNS... -o MODEL.json [options]

Fits the recommender on finished runs (run directories, or folders of them such as a sweep's
-o DIR): gradient-boosted trees (XGBoost) predicting seconds per epoch (log seconds, boosted
from a FLOPs/cores scaling law) and test top-1 after each epoch. Prints k-fold and
leave-one-configuration-out cross-validated MAE and RMSE of both, next to the baselines
(time: least squares of log seconds on log work and log cores; top-1: mean of the same model,
dataset and epoch in the training folds), and writes one JSON file with the k fold models of
each target (their spread is the uncertainty `recommend suggest` prints) and the CV figures.

Options:
  -o, --output FILE   model file to write (replaced atomically)
  --folds K           k of the k-fold CV and ensemble size (default 5)
  --seed S            fold shuffle and XGBoost seed (default 0)
  --rounds N          boosting rounds per model (default 200)
  --depth D           tree depth (default 3)
  --eta X             learning rate of the boosting (default 0.05)
  --plain-time        time trees learn log seconds from scratch instead of the baseline's residual
  -h, --help          this text
)";

}  // namespace

int fit_main(int argc, char** argv) {
  FitOptions o;
  std::string out;
  std::vector<std::string> paths;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::cout << kFitUsage;
      return 0;
    }
    if (a == "--plain-time") {
      o.time_from_baseline = false;
      continue;
    }
    const bool takes = a == "-o" || a == "--output" || a == "--folds" || a == "--seed" || a == "--rounds" ||
                       a == "--depth" || a == "--eta";
    if (!takes) {
      CHECK(a.empty() || a[0] != '-', a, ": unknown option (see recommend fit -h)");
      paths.push_back(a);
      continue;
    }
    CHECK(i + 1 < argc, a, ": needs a value");
    const char* v = argv[++i];
    if (a == "-o" || a == "--output") out = v;
    else if (a == "--folds") o.folds = cli::to_int32(cli::Given{v, a}, 2);
    else if (a == "--seed") o.seed = cli::to_uint64(cli::Given{v, a});
    else if (a == "--rounds") o.rounds = cli::to_int32(cli::Given{v, a}, 1);
    else if (a == "--depth") o.max_depth = cli::to_int32(cli::Given{v, a}, 1);
    else if (a == "--eta") o.eta = cli::to_double(cli::Given{v, a}, [](double x) { return x > 0; }, "a number > 0");
  }
  CHECK(!paths.empty(), "RUNS: none given (run directories or folders of them; see recommend fit -h)");
  CHECK(!out.empty(), "-o: no model file given (recommend fit RUNS... -o model.json)");
  const std::vector<RunRecord> runs = load_runs(paths);
  const FitResult r = fit_recommender(runs, o);
  std::cout << "recommend fit: " << r.runs << " finished runs (" << r.top1_rows << " evaluated epochs, "
            << r.configurations << " configurations) of " << runs.size() << " loaded\n"
            << cv_table(r);
  const std::string text = r.model.dump();
  write_file_atomic(out, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
  std::cout << "wrote " << out << " (" << r.model["time_models"].size() << " time and " << r.model["top1_models"].size()
            << " top-1 models)\n";
  return 0;
}

}  // namespace mpicnn::recommend
