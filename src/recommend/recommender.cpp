// The recommender's model file read back and used: the ensembles of fold models (fit.cpp)
// predict a configuration's seconds per epoch and top-1 per epoch, with their spread.
#include "recommend/recommender.h"

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/check.h"
#include "recommend/features.h"
#include "recommend/fit.h"
#include "recommend/xgb.h"

using nlohmann::json;

namespace mpicnn::recommend {

namespace {
// The loaded ensembles: time members carry the baseline their trees were boosted from.
struct TimeMember {
  TimeBaseline baseline;
  xgb::Booster booster;
};
struct Ensembles {
  std::vector<TimeMember> time;
  std::vector<xgb::Booster> top1;
  bool time_from_baseline = true;
};
}  // namespace

struct Recommender::Impl : Ensembles {};

Recommender::Recommender() = default;
Recommender::~Recommender() { delete impl_; }
Recommender::Recommender(Recommender&& o) noexcept : impl_(o.impl_) { o.impl_ = nullptr; }
Recommender& Recommender::operator=(Recommender&& o) noexcept {
  std::swap(impl_, o.impl_);
  return *this;
}

namespace {

xgb::Booster read_booster(const json& j) {
  CHECK(j.is_object() && j.contains("booster") && j.at("booster").is_object(), "a model entry without its booster");
  xgb::Booster b;
  b.load_json(j.at("booster").dump());
  b.set_param("nthread", "1");  // predictions are small; leave the cores to training runs
  return b;
}

void read_document(Ensembles& m, const json& doc) {
  CHECK(doc.is_object() && doc.value("format", "") == kModelFormat, "not a recommender model (format is not '",
        kModelFormat, "'; write one with recommend fit)");
  const int version = doc.value("version", 0);
  CHECK(version == kModelVersion, "recommender model version ", version, " (this build reads ", kModelVersion, ")");
  CHECK(doc.at("time_features").get<std::vector<std::string>>() == time_feature_names() &&
            doc.at("top1_features").get<std::vector<std::string>>() == top1_feature_names(),
        "made with other features than this build's (refit it with recommend fit)");
  m.time_from_baseline = doc.at("time_from_baseline").get<bool>();
  for (const json& t : doc.at("time_models")) {
    TimeMember tm{TimeBaseline{t.at("baseline").get<std::vector<double>>()}, read_booster(t)};
    CHECK(tm.baseline.coef.size() == 3, "a time model's baseline has ", tm.baseline.coef.size(), " coefficients, not 3");
    m.time.push_back(std::move(tm));
  }
  for (const json& t : doc.at("top1_models")) m.top1.push_back(read_booster(t));
  CHECK(!m.time.empty() && !m.top1.empty(), "no time or top-1 models");
}

// Mean and standard deviation of the ensemble's predictions.
std::pair<double, double> mean_sd(const std::vector<double>& v) {
  double s = 0, q = 0;
  for (double x : v) s += x;
  const double mean = s / double(v.size());
  for (double x : v) q += (x - mean) * (x - mean);
  return {mean, v.size() > 1 ? std::sqrt(q / double(v.size() - 1)) : 0.0};
}

}  // namespace

Recommender Recommender::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  CHECK(in.good(), path, ": cannot read the recommender model");
  Recommender r;
  r.impl_ = new Impl;
  try {
    read_document(*r.impl_, json::parse(in));
  } catch (const json::exception& e) {
    FAIL(path, ": not a valid recommender model (", e.what(), ")");
  } catch (const Error& e) {
    FAIL(path, ": ", e.message());
  }
  return r;
}

Prediction Recommender::predict(const RunConfig& config, int epochs) const {
  CHECK(impl_, "recommender: no model loaded");
  CHECK(epochs >= 0, "recommender: epochs ", epochs);
  Prediction p;
  xgb::DMatrix tx(time_features(config), 1, time_feature_names().size());
  std::vector<double> secs;
  for (const TimeMember& m : impl_->time) {
    if (impl_->time_from_baseline) tx.set_base_margin({float(m.baseline.predict_log_seconds(config))});
    secs.push_back(std::exp(double(m.booster.predict(tx).at(0))));
  }
  std::tie(p.seconds_per_epoch, p.seconds_sd) = mean_sd(secs);
  if (epochs == 0) return p;
  std::vector<float> rows;
  for (int e = 1; e <= epochs; ++e) {
    const std::vector<float> f = top1_features(config, e);
    rows.insert(rows.end(), f.begin(), f.end());
  }
  xgb::DMatrix ax(rows, size_t(epochs), top1_feature_names().size());
  std::vector<std::vector<double>> per_epoch(static_cast<size_t>(epochs));
  for (const xgb::Booster& b : impl_->top1) {
    const std::vector<float> y = b.predict(ax);
    for (int e = 0; e < epochs; ++e) per_epoch[size_t(e)].push_back(double(y[size_t(e)]));
  }
  for (const auto& v : per_epoch) {
    const auto [mean, sd] = mean_sd(v);
    p.top1.push_back(mean);
    p.top1_sd.push_back(sd);
  }
  return p;
}

}  // namespace mpicnn::recommend
