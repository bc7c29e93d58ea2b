#include "recommend/runs.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/check.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace mpicnn::recommend {

namespace {

json read_json(const fs::path& p) {
  std::ifstream in(p);
  CHECK(in.good(), p.string(), ": cannot read");
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    FAIL(p.string(), ": not JSON: ", e.what());
  }
}

double num(const json& j, const char* key, double fallback = 0) {
  const auto it = j.find(key);
  return it == j.end() || !it->is_number() ? fallback : it->get<double>();
}
std::string str(const json& j, const char* key) {
  const auto it = j.find(key);
  return it == j.end() || !it->is_string() ? std::string() : it->get<std::string>();
}
// An option of the run's recorded configuration (summary "params" or a sweep point's
// "options"), as text.
std::string option(const json& params, const char* key) { return str(params, key); }
double option_num(const json& params, const char* key, double fallback = 0) {
  const std::string v = option(params, key);
  if (v.empty()) return fallback;
  try {
    return std::stod(v);
  } catch (const std::exception&) {
    return fallback;
  }
}

// The configuration fields the ./train options give (summary params or a sweep point's options).
void config_from_options(RunConfig& c, const json& p) {
  c.model = option(p, "model");
  c.dataset = option(p, "dataset");
  c.data_path = option(p, "data");
  c.batch_per_rank = int(option_num(p, "batch-size"));
  c.workers = int(option_num(p, "workers"));
  c.threads_per_rank = std::max(1, int(option_num(p, "threads", 1)));
  const std::string dd = option(p, "distribute-data");
  c.distribute_data = !(dd == "false" || dd == "off" || dd == "no" || dd == "0");
  c.learning_rate = option_num(p, "learning-rate");
  c.optimizer = option(p, "optimizer");
  c.image_size = int(option_num(p, "image-size"));
  const std::string dev = option(p, "device");
  if (dev == "cuda") c.device = "cuda";
}

void read_summary(RunRecord& r, const fs::path& path) {
  const json s = read_json(path);
  CHECK(s.is_object() && s.contains("per_epoch") && s.contains("model"), path.string(),
        ": not a run's summary.json (no model or per_epoch)");
  try {
    r.name = str(s, "run_name");
    r.status = str(s, "status");
    RunConfig& c = r.config;
    if (s.contains("params")) config_from_options(c, s.at("params"));
    c.model = str(s, "model");
    c.ranks = int(num(s, "ranks", 1));
    c.nodes = int(num(s, "nodes", 1));
    c.threads_per_rank = int(num(s, "threads_per_rank", c.threads_per_rank));
    c.batch_per_rank = int(num(s, "batch_per_rank", c.batch_per_rank));
    c.cpu_model = str(s, "cpu_model");
    c.gpu_model = str(s, "gpu_model");
    const std::string device = str(s, "device");
    c.device = device.rfind("cuda", 0) == 0 ? "cuda" : "cpu";
    // The run facts (io/tracking.h RunInfo::facts); older runs lack them.
    if (s.contains("dataset_kind")) c.dataset = str(s, "dataset_kind");
    c.workers = int(num(s, "workers", c.workers));
    if (s.contains("distribute_data") && s.at("distribute_data").is_boolean())
      c.distribute_data = s.at("distribute_data").get<bool>();
    if (s.contains("input_shape") && s.at("input_shape").is_array() && s.at("input_shape").size() == 3) {
      c.channels = s.at("input_shape")[0].get<int>();
      c.image_size = s.at("input_shape")[1].get<int>();
    }
    c.num_classes = int(num(s, "num_classes"));
    c.train_samples = int64_t(num(s, "train_samples"));
    c.test_samples = int64_t(num(s, "test_samples"));
    c.model_params = num(s, "model_params");
    c.model_macs = num(s, "model_macs");
    c.cpus_per_node = int(num(s, "cpus_per_node"));
    c.gpus_per_node = int(num(s, "gpus_per_node"));
    r.images_per_s = num(s, "images_per_s");
    r.comm_share = num(s, "comm_share");
    for (const json& e : s.at("per_epoch")) {
      EpochResult x;
      x.epoch = int(num(e, "epoch"));
      x.seconds = num(e, "epoch_seconds");
      x.top1 = num(e, "top1", -1);
      x.train_loss = num(e, "train_loss", -1);
      x.test_loss = num(e, "test_loss", -1);
      x.comm_share = num(e, "comm_share");
      x.images = int64_t(num(e, "images"));
      r.epochs.push_back(x);
    }
    std::sort(r.epochs.begin(), r.epochs.end(), [](const EpochResult& a, const EpochResult& b) { return a.epoch < b.epoch; });
  } catch (const json::exception& e) {
    FAIL(path.string(), ": unexpected summary.json content: ", e.what());
  }
}

}  // namespace

std::string RunConfig::describe() const {
  std::ostringstream o;
  o << model << " b" << batch_per_rank << " x" << ranks << (ranks == 1 ? " rank" : " ranks") << " x"
    << threads_per_rank << (threads_per_rank == 1 ? " thread" : " threads") << ", " << workers
    << (workers == 1 ? " worker" : " workers") << (distribute_data ? "" : ", replicated data") << ", "
    << (dataset.empty() ? "?" : dataset) << " " << image_size << "px";
  if (nodes > 1) o << ", " << nodes << " nodes";
  if (device != "cpu") o << ", " << device;
  return o.str();
}

double RunRecord::seconds_per_epoch() const {
  if (epochs.empty()) return 0;
  double s = 0;
  for (const EpochResult& e : epochs) s += e.seconds;
  return s / double(epochs.size());
}

double RunRecord::final_top1() const {
  for (auto it = epochs.rbegin(); it != epochs.rend(); ++it)
    if (it->top1 >= 0) return it->top1;
  return -1;
}

RunRecord load_run(const std::string& dir) {
  const fs::path d(dir);
  const fs::path summary = d / "summary.json", point = d / "sweep_point.json";
  const bool has_summary = fs::exists(summary), has_point = fs::exists(point);
  CHECK(has_summary || has_point, dir, ": not a run directory (no summary.json or sweep_point.json)");
  RunRecord r;
  r.dir = d.lexically_normal().string();
  r.name = d.lexically_normal().filename().string();
  if (has_summary) read_summary(r, summary);
  if (has_point) {
    // The sweep's record of this point (sweep.h): what it asked for, and a failure's reason.
    const json p = read_json(point);
    if (!has_summary && p.contains("options")) config_from_options(r.config, p.at("options"));
    if (!has_summary && p.contains("options")) r.config.ranks = int(num(p, "ranks", 1));
    const std::string st = str(p, "status");
    if (st == "FAILED" || !has_summary) {
      r.status = st.empty() ? "FAILED" : st;
      r.error = str(p, "error");
    }
  }
  if (r.name.empty()) r.name = d.filename().string();
  return r;
}

std::vector<RunRecord> load_runs(const std::vector<std::string>& paths) {
  auto is_run = [](const fs::path& p) {
    return fs::exists(p / "summary.json") || fs::exists(p / "sweep_point.json");
  };
  std::vector<std::string> dirs;
  for (const std::string& path : paths) {
    const fs::path p(path);
    CHECK(fs::is_directory(p), path, ": not a directory (give run directories or folders of them)");
    if (is_run(p)) {
      dirs.push_back(path);
      continue;
    }
    const size_t before = dirs.size();
    for (auto it = fs::recursive_directory_iterator(p); it != fs::recursive_directory_iterator(); ++it) {
      if (!it->is_directory()) continue;
      if (is_run(it->path())) dirs.push_back(it->path().string());
      if (is_run(it->path()) || it.depth() >= 1) it.disable_recursion_pending();
    }
    CHECK(dirs.size() > before, path, ": holds no run directory (summary.json or sweep_point.json)");
  }
  std::sort(dirs.begin(), dirs.end());
  dirs.erase(std::unique(dirs.begin(), dirs.end()), dirs.end());
  std::vector<RunRecord> runs;
  for (const std::string& d : dirs) runs.push_back(load_run(d));
  return runs;
}

}  // namespace mpicnn::recommend
