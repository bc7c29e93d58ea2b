// RunTracker: metrics.jsonl, summary.json and the MLflow FileStore layout (the classic
// mlruns/<experiment>/<run>/{meta.yaml,params,metrics,tags,artifacts} that `mlflow ui
// --backend-store-uri file:RUN/mlruns` reads). Not an MLflow client: no server, no database.
#include "io/tracking.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#include "core/check.h"
#include "io/atomic_file.h"

namespace mpicnn {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

int64_t system_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void write_text(const fs::path& path, const std::string& text) {
  write_file_atomic(path.string(), {reinterpret_cast<const uint8_t*>(text.data()), text.size()});
}

// One whole line or none: a short write (a full disk, a file size limit) is cut back, so the file
// never ends in a torn line that breaks a JSON Lines or MLflow reader.
void append_line(const fs::path& path, const std::string& line) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0666);
  CHECK(fd >= 0, path.string(), ": cannot open: ", std::strerror(errno));
  struct stat st {};
  const bool sized = ::fstat(fd, &st) == 0;
  const ssize_t n = ::write(fd, line.data(), line.size());
  const int err = errno;
  if (n != ssize_t(line.size())) {
    if (n > 0 && sized) (void)!::ftruncate(fd, st.st_size);
    ::close(fd);
    FAIL(path.string(), ": write failed: ", n < 0 ? std::strerror(err) : "short write (disk full?)");
  }
  ::close(fd);
}

// YAML single-quoted scalar: only the quote itself needs escaping.
std::string yq(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

// Shortest text that parses back to the same double; "nan" / "inf" as Python's repr.
std::string num(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  (void)ec;
  return std::string(buf, end);
}

std::string new_run_id() {
  std::random_device rd;
  char buf[33];
  for (int i = 0; i < 4; ++i) std::snprintf(buf + 8 * i, 9, "%08x", unsigned(rd()));
  return buf;
}

std::string file_uri(const fs::path& p) { return "file://" + fs::absolute(p).lexically_normal().string(); }

// JSON has no NaN: a metric that was not measured (no test set) is written as null.
json num_or_null(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

// An epoch as metrics.jsonl's line (with "kind") or summary.json's per_epoch entry.
json epoch_json(const EpochRecord& e, bool with_kind) {
  json j = {{"epoch", e.epoch}, {"train_loss", num_or_null(e.train_loss)},
            {"test_loss", num_or_null(e.test_loss)}, {"top1", num_or_null(e.top1)},
            {"top5", num_or_null(e.top5)}, {"epoch_seconds", e.epoch_seconds},
            {"comm_share", e.comm_share}, {"data_wait_s", e.data_wait_s}, {"images", e.images}};
  for (const auto& [k, v] : e.metrics) j[k] = num_or_null(v);
  if (with_kind) j["kind"] = "epoch";
  return j;
}

// A fact's MLflow param value: strings as they are, arrays joined by ',', others as JSON.
std::string param_text(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array()) return v.dump();
  std::string out;
  for (const json& e : v) out += (out.empty() ? "" : ",") + param_text(e);
  return out;
}

}  // namespace

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    const auto b = line.find_first_not_of(" \t", colon + 1);
    return b == std::string::npos ? "" : line.substr(b);
  }
  return "";
}

std::string mlflow_user() {
  for (const char* name : {"LOGNAME", "USER", "LNAME", "USERNAME"}) {
    const char* v = std::getenv(name);
    if (v && *v) return v;
  }
  // getpwuid_r, not getpwuid: the loader threads may be running by now.
  long size = ::sysconf(_SC_GETPW_R_SIZE_MAX);
  std::vector<char> buf(size > 0 ? size_t(size) : 16384);
  struct passwd pw {};
  struct passwd* found = nullptr;
  const int err = ::getpwuid_r(::geteuid(), &pw, buf.data(), buf.size(), &found);
  if (err == 0 && found && found->pw_name && *found->pw_name) return found->pw_name;
  return "unknown";
}

std::map<std::string, std::string> mlflow_params(const RunInfo& info) {
  // MLflow shows an empty param as a value; a flag not given, or no GPU, is no value at all.
  std::map<std::string, std::string> params;
  for (const auto& [k, v] : info.params)
    if (!v.empty()) params[k] = v;
  json facts = info.facts;
  facts["ranks"] = info.ranks;
  facts["nodes"] = info.nodes;
  facts["threads_per_rank"] = info.threads_per_rank;
  facts["cpu_model"] = cpu_model_name();
  for (const auto& [k, v] : facts.items()) {
    std::string flag = k;
    std::replace(flag.begin(), flag.end(), '_', '-');
    const std::string text = param_text(v);
    if (info.params.count(k) || info.params.count(flag) || text.empty()) continue;
    params[k] = text;
  }
  return params;
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "";
  return buf;
}

// MLflow accepts alphanumerics, '_', '-', '.', ' ' and '/' in keys; '/' would make a
// subdirectory in the file store, so it is replaced as well.
std::string mlflow_safe_key(const std::string& key) {
  std::string out = key;
  for (char& c : out)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' || c == ' '))
      c = '_';
  return out.empty() ? "_" : out;
}

RunTracker::RunTracker(const std::string& run_dir, RunInfo info, std::function<int64_t()> clock_ms)
    : run_dir_(run_dir), info_(std::move(info)), clock_ms_(clock_ms ? std::move(clock_ms) : system_ms) {
  std::error_code ec;
  fs::create_directories(run_dir_, ec);
  CHECK(!ec, run_dir_, ": cannot create run directory: ", ec.message());
  if (info_.run_name.empty()) info_.run_name = fs::path(run_dir_).lexically_normal().filename().string();
  if (info_.run_name.empty()) info_.run_name = "run";
  mlruns_ = (fs::path(run_dir_) / "mlruns").string();
  start_ms_ = clock_ms_();

  // Resuming continues the same MLflow run and keeps the epochs already recorded.
  const fs::path summary_path = fs::path(run_dir_) / "summary.json";
  if (info_.resume && fs::exists(summary_path)) {
    std::ifstream in(summary_path);
    json old;
    try {
      old = json::parse(in);
      run_id_ = old.at("mlflow_run_id").get<std::string>();
      start_ms_ = old.at("started_unix_ms").get<int64_t>();
      // A metric that was not measured (no evaluation that epoch) was written as null.
      auto metric = [](const json& e, const char* key) {
        const auto it = e.find(key);
        return it == e.end() || it->is_null() ? NAN : it->get<double>();
      };
      const json standard = epoch_json({}, false);
      for (const json& e : old.at("per_epoch")) {
        EpochRecord r{e.at("epoch").get<int64_t>(), metric(e, "train_loss"), metric(e, "test_loss"),
                      metric(e, "top1"), metric(e, "top5"), e.at("epoch_seconds").get<double>(),
                      e.value("comm_share", 0.0), e.value("data_wait_s", 0.0), e.value("images", int64_t(0)), {}};
        for (const auto& [k, v] : e.items())  // the task's own metrics
          if (!standard.contains(k) && (v.is_number() || v.is_null())) r.metrics.push_back({k, metric(e, k.c_str())});
        epochs_.push_back(std::move(r));
      }
    } catch (const json::exception& e) {
      FAIL(summary_path.string(), ": cannot resume from it: ", e.what());
    }
  }
  if (run_id_.empty()) run_id_ = new_run_id();

  const fs::path exp = fs::path(mlruns_) / "0";
  mlrun_ = (exp / run_id_).string();
  for (const char* sub : {"params", "metrics", "tags", "artifacts"}) {
    fs::create_directories(fs::path(mlrun_) / sub, ec);
    CHECK(!ec, mlrun_, "/", sub, ": cannot create: ", ec.message());
  }
  if (!fs::exists(exp / "meta.yaml")) {
    const std::string now = std::to_string(start_ms_);
    write_text(exp / "meta.yaml", "artifact_location: " + yq(file_uri(exp)) +
                                      "\ncreation_time: " + now +
                                      "\nexperiment_id: '0'\nlast_update_time: " + now +
                                      "\nlifecycle_stage: active\nname: Default\n");
  }
  user_ = mlflow_user();
  const std::map<std::string, std::string> tags = {
      {"mlflow.runName", info_.run_name},
      {"mlflow.user", user_},
      {"mlflow.source.name", "mpicnn"},
      {"mlflow.source.type", "LOCAL"}};
  for (const auto& [k, v] : tags) write_text(fs::path(mlrun_) / "tags" / k, v);
  write_params();
  write_run_meta(RunStatus::Running, -1);
  write_summary();
}

RunTracker::~RunTracker() {
  if (finished_) return;
  try {
    finish(RunStatus::Failed);
  } catch (...) {  // a destructor must not throw; the run stays RUNNING on disk
  }
}

// The params directory holds exactly this run's params: a resumed run whose options changed
// (another --epochs, --resume now set, --save-dir now unset) keeps no stale value from before.
void RunTracker::write_params() {
  const fs::path dir = fs::path(mlrun_) / "params";
  std::map<std::string, std::string> files;
  for (const auto& [k, v] : mlflow_params(info_)) files[mlflow_safe_key(k)] = v;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (!files.count(entry.path().filename().string())) fs::remove(entry.path(), ec);
  for (const auto& [k, v] : files) write_text(dir / k, v);
}

std::string RunTracker::artifact_dir() const { return (fs::path(mlrun_) / "artifacts").string(); }

void RunTracker::log_artifact(const std::string& file, const std::string& name) {
  const std::string leaf = name.empty() ? fs::path(file).filename().string() : name;
  const fs::path target = fs::path(artifact_dir()) / leaf;
  std::ifstream in(file, std::ios::binary);
  CHECK(in.is_open(), file, ": cannot read it to log as an MLflow artifact (", std::strerror(errno),
        ")");
  AtomicFile out(target.string());
  std::vector<char> buf(size_t(1) << 20);  // weights run to hundreds of MiB: streamed
  while (in) {
    in.read(buf.data(), std::streamsize(buf.size()));
    if (in.gcount() > 0) out.write(buf.data(), size_t(in.gcount()));
  }
  CHECK(!in.bad(), file, ": read failed while logging it as an MLflow artifact");
  out.commit();
}

void RunTracker::write_run_meta(RunStatus status, int64_t end_ms) {
  std::string y;
  y += "artifact_uri: " + yq(file_uri(artifact_dir())) + "\n";
  y += "end_time: " + (end_ms < 0 ? std::string("null") : std::to_string(end_ms)) + "\n";
  y += "entry_point_name: ''\n";
  y += "experiment_id: '0'\n";
  y += "lifecycle_stage: active\n";
  y += "run_id: " + yq(run_id_) + "\n";
  y += "run_name: " + yq(info_.run_name) + "\n";
  y += "run_uuid: " + yq(run_id_) + "\n";
  y += "source_name: ''\n";
  y += "source_type: 4\n";  // SourceType.LOCAL
  y += "source_version: ''\n";
  y += "start_time: " + std::to_string(start_ms_) + "\n";
  y += "status: " + std::to_string(int(status)) + "\n";
  y += "tags: []\n";
  y += "user_id: " + yq(user_) + "\n";
  write_text(fs::path(mlrun_) / "meta.yaml", y);
}

void RunTracker::append_jsonl(const json& j) {
  append_line(fs::path(run_dir_) / "metrics.jsonl", j.dump() + "\n");
}

void RunTracker::log_metric(const std::string& key, double value, int64_t step, int64_t ts) {
  append_line(fs::path(mlrun_) / "metrics" / mlflow_safe_key(key),
              std::to_string(ts) + ' ' + num(value) + ' ' + std::to_string(step) + '\n');
}

void RunTracker::log_step(const StepRecord& r) {
  append_jsonl({{"kind", "step"}, {"step", r.step}, {"epoch", r.epoch}, {"loss", num_or_null(r.loss)},
                {"lr", r.lr}, {"images_per_s", r.images_per_s}, {"time", r.time}});
  const int64_t ts = clock_ms_();
  log_metric("loss", r.loss, r.step, ts);
  log_metric("lr", r.lr, r.step, ts);
  log_metric("images_per_s", r.images_per_s, r.step, ts);
}

void RunTracker::log_epoch(const EpochRecord& r) {
  append_jsonl(epoch_json(r, true));
  const int64_t ts = clock_ms_();
  const std::pair<const char*, double> ms[] = {
      {"train_loss", r.train_loss}, {"test_loss", r.test_loss}, {"top1", r.top1},
      {"top5", r.top5}, {"epoch_seconds", r.epoch_seconds}, {"comm_share", r.comm_share},
      {"data_wait_s", r.data_wait_s}};
  for (const auto& [k, v] : ms)
    if (std::isfinite(v)) log_metric(k, v, r.epoch, ts);
  for (const auto& [k, v] : r.metrics)
    if (std::isfinite(v)) log_metric(k, v, r.epoch, ts);
  // A resumed run that repeats an epoch replaces it rather than counting it twice.
  std::erase_if(epochs_, [&](const EpochRecord& e) { return e.epoch == r.epoch; });
  epochs_.push_back(r);
  write_summary();
}

void RunTracker::set_summary(const std::string& key, json value) {
  extra_[key] = std::move(value);
  write_summary();
}

json RunTracker::summary() const {
  json s;
  s["run_name"] = info_.run_name;
  s["status"] = status_;
  s["mlflow_run_id"] = run_id_;
  s["started_unix_ms"] = start_ms_;
  s["model"] = info_.model;
  s["dataset"] = info_.dataset;
  s["ranks"] = info_.ranks;
  s["nodes"] = info_.nodes;
  s["threads_per_rank"] = info_.threads_per_rank;
  s["hosts"] = info_.hosts;
  s["cpu_model"] = cpu_model_name();
  s["gpu_model"] = "";  // the CPU; facts name the GPU of a GPU run
  s["batch_per_rank"] = info_.batch_per_rank;
  s["global_batch"] = info_.global_batch;
  s["epochs"] = info_.epochs;
  s["epochs_done"] = epochs_.size();
  double seconds = 0;
  int64_t images = 0;
  json times = json::array(), per = json::array();
  for (const EpochRecord& e : epochs_) {
    seconds += e.epoch_seconds;
    images += e.images;
    times.push_back(e.epoch_seconds);
    per.push_back(epoch_json(e, false));
  }
  s["train_seconds"] = seconds;
  s["images_per_s"] = seconds > 0 ? json(double(images) / seconds) : json(nullptr);
  s["epoch_seconds"] = times;
  s["final_train_loss"] = epochs_.empty() ? json(nullptr) : num_or_null(epochs_.back().train_loss);
  s["final_test_loss"] = epochs_.empty() ? json(nullptr) : num_or_null(epochs_.back().test_loss);
  s["test_top1"] = epochs_.empty() ? json(nullptr) : num_or_null(epochs_.back().top1);
  s["test_top5"] = epochs_.empty() ? json(nullptr) : num_or_null(epochs_.back().top5);
  s["per_epoch"] = per;
  s["params"] = info_.params;
  for (const auto& [k, v] : info_.facts.items()) s[k] = v;
  for (const auto& [k, v] : extra_.items()) s[k] = v;
  return s;
}

void RunTracker::write_summary() {
  write_text(fs::path(run_dir_) / "summary.json", summary().dump(2) + "\n");
}

void RunTracker::finish(RunStatus status) {
  CHECK(!finished_, run_dir_, ": run already finished");
  CHECK(status != RunStatus::Running, run_dir_, ": finish() needs a terminal status");
  finished_ = true;
  status_ = status == RunStatus::Finished ? "FINISHED" : status == RunStatus::Failed ? "FAILED" : "KILLED";
  write_summary();
  write_run_meta(status, clock_ms_());
  log_artifact((fs::path(run_dir_) / "summary.json").string());
}

}  // namespace mpicnn
